#pragma once
// The nccl engine: ranks of one process on CUDA devices, one NCCL
// communicator each (ncclCommInitAll), summing in place in device memory on
// a stream of the engine's per rank. Float calls on a BF16 wire (asked for,
// or by default from GpuAllReduceSizes::nccl_bf16_min_bytes on) are rounded
// to BF16 on the device, summed in BF16 by NCCL (each sum rounded to BF16
// again, unlike the host engines' F32 sums) and widened back. Doubles cross
// exactly. CUDA builds with NCCL only.
//
// Across the processes of an MPI launch (NcclSpan) each process makes the
// communicators of its own ranks (ncclCommInitRank in one group) with a
// unique id one process made and the launch shared (MpiProcessGroup).
//
// The ranks must pass the same element count and type (the rank group
// does); NCCL cannot check it. allreduce_on_stream queues the same work on
// the caller's stream (the rank's graph's) and returns at once.
//
// Failure: a call that does not complete within the timeout (a rank that
// never came) or abort() fails the group and aborts every communicator, so
// that no rank stays inside NCCL; the communicators are not used again. The
// constructor makes every connection (one sum on all ranks), so that a call
// only queues work and a missing rank shows as a call that does not end.

#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/comm/allreduce_failure.h"
#include "ggml-ext/gpu/cuda_runtime.h"

#if defined(LLAMA_TP_HAVE_HIP)
#include <rccl/rccl.h>  // RCCL keeps NCCL's names
#else
#include <nccl.h>
#endif

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <vector>

namespace llama_tp {

// This process's ranks among the ranks of several processes.
struct NcclSpan {
    int first_rank = 0;   // this process's ranks are [first_rank, first_rank + config.n_ranks)
    int total_ranks = 0;  // of every process
    ncclUniqueId id{};    // ncclGetUniqueId of one process, the same in all
};

class NcclAllReduce final : public AllReduceWithGroupFailure {
  public:
    // Throws llama_tp::Error when the ranks are not on CUDA devices or NCCL
    // cannot make the communicators.
    explicit NcclAllReduce(const AllReduceConfig & config);
    // The same for ranks of several processes; every process calls it at
    // once (NCCL joins them), with the same span.id.
    NcclAllReduce(const AllReduceConfig & config, const NcclSpan & span);
    ~NcclAllReduce() override;

    // Throws llama_tp::Error unless the config's ranks are on CUDA devices, one GPU each.
    static void check_devices(const AllReduceConfig & config);

    const char * name() const override { return "nccl"; }
    std::string joins() const override { return ranks_text(total_ranks_) + " on CUDA devices, NCCL"; }
    int n_ranks() const override { return total_ranks_; }
    bool takes_device_memory() const override { return true; }
    bool rounds_to_bf16() const override;
    void allreduce(int rank, float * data, size_t n) override;
    void allreduce(int rank, double * data, size_t n) override;
    bool runs_on_stream() const override { return true; }
    bool sums_replay_in_graphs() const override { return true; }  // NCCL's calls may be captured
    void allreduce_on_stream(int rank, float * data, size_t n, void * stream) override;
    void allreduce_on_stream(int rank, double * data, size_t n, void * stream) override;
    void abort(const std::string & why) override;

  private:
    struct RankState {
        int device = 0;
        ncclComm_t comm = nullptr;
        std::unique_ptr<CudaStream> stream;
        void * scratch = nullptr;  // BF16 values of a call (device memory)
        size_t scratch_bytes = 0;
        // Outgrown scratch buffers, freed with the engine: a captured CUDA
        // graph may still hold one (StepCapture), and freeing waits for the device.
        std::vector<void *> retired;
    };

    // stream: the caller's, or nullptr for the engine's own, waited for.
    void reduce(int rank, float * data, size_t n, cudaStream_t stream);
    void reduce(int rank, double * data, size_t n, cudaStream_t stream);
    void queue_sum(RankState & me, void * data, size_t n, ncclDataType_t type, cudaStream_t stream);
    void finish(int rank, RankState & me);
    void * scratch(RankState & r, size_t bytes);
    static void release_scratch(RankState & r);
    void start(const AllReduceConfig & config, std::vector<ncclComm_t> comms);
    void connect();
    void fail_and_abort(const std::string & why);
    RankState * local(int rank);

    const std::optional<WireType> wire_;
    const double timeout_s_;
    const size_t bf16_min_bytes_;
    int first_rank_ = 0, total_ranks_ = 0;
    std::vector<RankState> ranks_;  // this process's
    // Calls into NCCL hold it shared; aborting the communicators, exclusive.
    std::shared_mutex comms_mutex_;
    bool aborted_ = false;  // under comms_mutex_
};

}  // namespace llama_tp
