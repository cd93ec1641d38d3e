#pragma once
// The mpi engine: ranks in several processes (one or several machines).
// Inside a process its ranks meet in shared memory: each publishes its
// buffer, the process's first rank (the leader) adds the others' values to
// its own in rank order, sums across processes with MPI and writes the
// result back into every local buffer. Across processes, small messages (and
// all between two processes) go by exchange: every process sends its values
// to every other and adds them all up in process order, so every process
// gets the same bits; at 16 KiB between two processes over shared memory
// that measured 9.0 us, a blocking MPI_Allreduce 11.3 us and MPI_Iallreduce
// 14.7 us. Larger messages among more processes use MPI_Iallreduce in
// place. F64 (the exact sums of split-invariant mode) travels as is; on a
// BF16 wire each process's values travel as bf16 and are added in f32.
//
// The leader waits on MPI requests by testing them with backoff (Open MPI's
// blocking calls spin a core); a collective that does not complete within
// the timeout fails the group, naming the process it waited for.

#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/comm/allreduce_failure.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

namespace llama_tp {

// Where the processes of the group are.
struct MpiPeers {
    int process = 0;
    std::vector<std::string> hosts;  // per process
    // Set when a request is left posted (a peer stopped answering): MPI
    // cannot be finalised cleanly any more.
    std::shared_ptr<std::atomic<bool>> abandoned;
};

class MpiAllReduce final : public AllReduceWithGroupFailure {
  public:
    // config.n_ranks: the ranks of this process. data: a communicator of the
    // group's processes used for nothing else.
    MpiAllReduce(MPI_Comm data, MpiPeers peers, const AllReduceConfig & config);

    const char * name() const override { return "mpi"; }
    std::string joins() const override { return "MPI across processes, shared memory inside one"; }
    bool rounds_to_bf16() const override { return wire_ == WireType::BF16; }
    int n_ranks() const override { return n_local_ * (int) peers_.hosts.size(); }
    void allreduce(int rank, float * data, size_t n) override { run(rank, data, n); }
    void allreduce(int rank, double * data, size_t n) override { run(rank, data, n); }

  private:
    struct alignas(64) LocalSlot {
        void * data = nullptr;
        size_t n = 0;
        size_t element_size = 0;
        std::atomic<uint64_t> arrived{0};  // calls this rank has published its buffer for
        uint64_t calls = 0;                // owner only
    };

    template <typename T>
    void run(int rank, T * data, size_t n);
    template <typename T>
    void lead(T * data, size_t n, uint64_t call);
    bool await_local_ranks(uint64_t call);
    bool local_counts_match(std::string & why) const;
    template <typename T>
    bool across_processes(T * data, size_t n);
    template <typename T>
    bool iallreduce(T * data, size_t n);
    template <typename T>
    bool exchange_sum(T * data, size_t n);
    bool exchange_sum_bf16(float * data, size_t n);
    // Sends n values of `mine` to every other process and receives theirs
    // into theirs[p * n ...].
    template <typename W>
    bool exchange(const W * mine, W * theirs, size_t n);
    // Maps an MPI outcome to success, or to the group's failure.
    bool outcome(int rc, const char * what);
    std::string process_text(int process) const;

    const MPI_Comm comm_;
    const MpiPeers peers_;
    const int n_local_;
    const int first_rank_;
    const WireType wire_;
    const double timeout_s_;
    std::vector<LocalSlot> slots_;
    std::atomic<uint64_t> released_{0};        // calls the leader has finished (or failed)
    std::atomic<uint64_t> leader_entered_{0};  // calls the leader has begun
    std::vector<uint16_t> bf16_send_, bf16_recv_;
    std::vector<uint8_t> received_;      // other processes' values
    std::vector<MPI_Request> requests_;  // receives first, then sends
    std::vector<MPI_Status> statuses_;
};

}  // namespace llama_tp
