#pragma once
// The cpu engine: ranks are threads of one process and sum through shared
// host memory. Each call: every rank publishes its buffer and arrives at a
// barrier; then each rank sums its own contiguous slice of the elements over
// all ranks' buffers (ranks 0..n-1 in that order, so every rank gets the same
// bits) and writes the sum into every buffer, reduce-scatter and all-gather
// in one pass; a second barrier says all slices are written. The next call's
// arrival doubles as the barrier after that, so a call costs two barriers.
// (Summing everything on every rank through staging copies would save one
// barrier, but measured slower at 16 KiB with ranks sharing cores: it does
// n_ranks times the work.)
// On a bf16 wire each contribution is rounded to bf16 before it is added
// (see allreduce_wire.h); sums stay f32.
//
// Failure: a rank that waits at the arrival barrier longer than the timeout,
// or abort(), poisons the barrier and every waiting rank returns. Opening and
// poisoning are decided on one atomic word, so either all ranks go on to
// touch each other's buffers or none does; once the barrier has opened the
// second barrier is not abandoned (the other ranks are writing into this
// rank's buffer and finish in bounded time).

#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/comm/allreduce_failure.h"

#include <atomic>
#include <cstdint>
#include <vector>

namespace llama_tp {

class CpuAllReduce final : public AllReduceEngine {
  public:
    // The arrival barrier keeps one bit per rank in a 64-bit word.
    static constexpr int kMaxRanks = 32;

    // Throws llama_tp::Error when n_ranks is outside [1, kMaxRanks].
    explicit CpuAllReduce(const AllReduceConfig & config);

    const char * name() const override { return "cpu"; }
    std::string joins() const override { return ranks_text(n_ranks_) + " in one process, host memory"; }
    bool rounds_to_bf16() const override { return wire_ == WireType::BF16; }
    int n_ranks() const override { return n_ranks_; }
    void allreduce(int rank, float * data, size_t n) override { run(rank, data, n); }
    void allreduce(int rank, double * data, size_t n) override { run(rank, data, n); }
    bool failed() const override;
    std::string error() const override { return failure_.message(); }
    void abort(const std::string & why) override;

  private:
    // What one rank shares; a cache line of its own so ranks do not disturb each other.
    struct alignas(64) RankSlot {
        void * data = nullptr;          // this call's buffer, valid once the arrival barrier opens
        size_t n = 0;                   // this call's element count
        size_t element_size = 0;        // and element size
        std::atomic<uint64_t> done{0};  // calls whose slice this rank has written
        uint64_t calls = 0;             // calls this rank has passed the arrival barrier for (owner only)
    };

    template <typename T>
    void run(int rank, T * data, size_t n);
    bool arrive(int rank);
    bool give_up_waiting(uint64_t generation);
    bool counts_match() const;
    template <typename T>
    void reduce_slice(int rank, size_t n);
    void await_slices(uint64_t call) const;
    // Poisons the group; why() builds the message (inside the failure record, where throwing is caught).
    template <typename Why>
    void fail(Why why);

    const int n_ranks_;
    const WireType wire_;
    const double timeout_s_;
    std::vector<RankSlot> slots_;
    // Arrival barrier: bits 0-31 ranks arrived, bit 32 poisoned (group failed), bits 33-63 generation.
    alignas(64) std::atomic<uint64_t> barrier_{0};
    FailureRecord failure_;
};

}  // namespace llama_tp
