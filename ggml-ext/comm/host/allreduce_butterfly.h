#pragma once
// The butterfly engine: the generic fallback. Ranks exchange partial sums in
// pairs (recursive doubling) through staging buffers the engine owns, so no
// rank ever touches another rank's buffer. With a rank count that is not a
// power of two, each extra rank first hands its values to a partner among
// the rest and receives the final sum from it at the end. Slower than cpu
// (log2(n) full copies per call), works for any rank count, same failure
// semantics. Both partners of a pair add the same two operands (addition is
// commutative), so every rank ends with the same bits.

#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/comm/allreduce_failure.h"

#include <atomic>
#include <cstdint>
#include <vector>

namespace llama_tp {

class ButterflyAllReduce final : public AllReduceWithGroupFailure {
  public:
    // Throws llama_tp::Error when n_ranks < 1.
    explicit ButterflyAllReduce(const AllReduceConfig & config);

    const char * name() const override { return "butterfly"; }
    std::string joins() const override { return ranks_text(n_ranks_) + ", pairwise exchange"; }
    bool rounds_to_bf16() const override { return wire_ == WireType::BF16; }
    int n_ranks() const override { return n_ranks_; }
    void allreduce(int rank, float * data, size_t n) override { run(rank, data, n); }
    void allreduce(int rank, double * data, size_t n) override { run(rank, data, n); }

  private:
    // One rank's mailbox; a cache line of its own for the flags peers poll.
    struct alignas(64) RankSlot {
        std::atomic<uint64_t> posted{0};    // step number of the values now in staging
        std::atomic<uint64_t> consumed{0};  // step number of the latest peer staging this rank has read
        std::atomic<uint64_t> entered{0};   // calls this rank has entered (names missing ranks)
        size_t posted_n = 0;                // element count behind posted
        size_t posted_size = 0;             // and element size
        std::vector<double> staging;        // holds floats or doubles
        // Owner only:
        uint64_t calls = 0;
        int last_reader = -1;  // the rank that reads the current staging
        uint64_t last_post = 0;
    };

    // One rank's part in one call.
    template <typename T>
    struct Turn {
        int rank;
        T * data;
        size_t n;
        uint64_t call;
    };

    uint64_t step_number(uint64_t call, int step) const { return call * steps_per_call_ + step + 1; }
    template <typename T>
    void run(int rank, T * data, size_t n);
    template <typename T>
    bool run_folded(const Turn<T> & turn);
    template <typename T>
    bool run_paired(const Turn<T> & turn);
    template <typename T>
    bool post(const Turn<T> & turn, int reader, uint64_t step, WireType wire);
    template <typename T>
    bool receive(const Turn<T> & turn, int from, uint64_t step, bool add);
    bool wait_for(uint64_t call, const std::atomic<uint64_t> & flag, uint64_t at_least, int awaited);
    void fail_timeout(uint64_t call, int awaited);

    const int n_ranks_;
    const WireType wire_;
    const double timeout_s_;
    const int paired_ranks_;    // the largest power of two <= n_ranks
    const int levels_;          // log2(paired_ranks_): pairwise exchange rounds
    const int steps_per_call_;  // fold + levels + unfold
    std::vector<RankSlot> slots_;
};

}  // namespace llama_tp
