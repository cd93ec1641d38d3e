#include "ggml-ext/comm/cuda/allreduce_nccl.h"

#include "ggml-ext/comm/cuda/allreduce_cuda_kernels.h"
#include "ggml-ext/comm/allreduce_wire.h"
#include "ggml-ext/error.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace llama_tp {
namespace {

void check_nccl(ncclResult_t status, const char * what) {
    if (status != ncclSuccess) throw Error(std::string(what) + ": " + ncclGetErrorString(status));
}

}  // namespace

void NcclAllReduce::check_devices(const AllReduceConfig & config) {
    if (config.memory != RankMemory::Cuda) throw Error("the ranks' values are in host memory");
    if ((int) config.cuda_devices.size() != config.n_ranks) {
        throw Error("needs one CUDA device per rank (" + std::to_string(config.cuda_devices.size()) + " for " +
                    std::to_string(config.n_ranks) + " ranks)");
    }
    for (size_t a = 0; a < config.cuda_devices.size(); ++a) {
        for (size_t b = a + 1; b < config.cuda_devices.size(); ++b) {
            if (config.cuda_devices[a] == config.cuda_devices[b]) {
                throw Error("needs a GPU per rank, and ranks " + std::to_string(a) + " and " + std::to_string(b) +
                            " are both on CUDA device " + std::to_string(config.cuda_devices[a]));
            }
        }
    }
}

NcclAllReduce::NcclAllReduce(const AllReduceConfig & config)
    : wire_(config.wire),
      timeout_s_(config.timeout_s),
      bf16_min_bytes_(config.gpu_sizes.nccl_bf16_min_bytes),
      total_ranks_(config.n_ranks) {
    check_devices(config);
    std::vector<ncclComm_t> comms(config.cuda_devices.size());
    check_nccl(ncclCommInitAll(comms.data(), (int) comms.size(), config.cuda_devices.data()), "ncclCommInitAll");
    start(config, std::move(comms));
}

NcclAllReduce::NcclAllReduce(const AllReduceConfig & config, const NcclSpan & span)
    : wire_(config.wire),
      timeout_s_(config.timeout_s),
      bf16_min_bytes_(config.gpu_sizes.nccl_bf16_min_bytes),
      first_rank_(span.first_rank),
      total_ranks_(span.total_ranks) {
    check_devices(config);
    if (span.first_rank < 0 || span.first_rank + config.n_ranks > span.total_ranks) {
        throw Error("ranks [" + std::to_string(span.first_rank) + ", " +
                    std::to_string(span.first_rank + config.n_ranks) + ") are not among the group's " +
                    std::to_string(span.total_ranks));
    }
    // One process's ranks join in one NCCL group: each init waits for the others.
    std::vector<ncclComm_t> comms(config.cuda_devices.size());
    ncclResult_t status = ncclGroupStart();
    for (size_t r = 0; r < comms.size() && status == ncclSuccess; ++r) {
        CurrentDevice current(config.cuda_devices[r]);
        status = ncclCommInitRank(&comms[r], span.total_ranks, span.id, span.first_rank + (int) r);
    }
    const ncclResult_t ended = ncclGroupEnd();
    if (status == ncclSuccess) status = ended;
    if (status != ncclSuccess) {
        for (ncclComm_t comm : comms) {
            if (comm) ncclCommAbort(comm);
        }
        check_nccl(status, "ncclCommInitRank");
    }
    start(config, std::move(comms));
}

// Takes the communicators (destroying them if it throws) and connects the ranks.
void NcclAllReduce::start(const AllReduceConfig & config, std::vector<ncclComm_t> comms) {
    ranks_.resize(comms.size());
    for (size_t r = 0; r < comms.size(); ++r) {
        ranks_[r].device = config.cuda_devices[r];
        ranks_[r].comm = comms[r];
    }
    try {
        for (RankState & r : ranks_) r.stream = std::make_unique<CudaStream>(r.device);
        connect();
    } catch (...) {
        // Aborted, not destroyed: a rank of another process may never have come.
        for (RankState & r : ranks_) {
            ncclCommAbort(r.comm);
            release_scratch(r);
        }
        throw;
    }
}

// One sum of one value on every rank at once (one thread drives them all,
// so in one group): NCCL makes its connections now, not in the first call.
void NcclAllReduce::connect() {
    for (RankState & r : ranks_) {
        CurrentDevice current(r.device);
        scratch(r, 256);
        check_cuda(cudaMemsetAsync(r.scratch, 0, sizeof(float), r.stream->get()), "cudaMemsetAsync", r.device);
    }
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (RankState & r : ranks_) {
        ncclAllReduce(r.scratch, r.scratch, 1, ncclFloat32, ncclSum, r.comm, r.stream->get());
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd (connecting the ranks)");
    for (RankState & r : ranks_) {
        const std::atomic<bool> never{false};
        if (!wait_for_stream(r.stream->get(), r.device, timeout_s_, never)) {
            throw Error("connecting the ranks took longer than " + std::to_string((int) timeout_s_) + " s");
        }
    }
}

NcclAllReduce::~NcclAllReduce() {
    for (RankState & r : ranks_) {
        if (!aborted_) ncclCommDestroy(r.comm);
        release_scratch(r);  // needs no current device
    }
}

bool NcclAllReduce::rounds_to_bf16() const {
    return rounds_any_call(wire_, bf16_min_bytes_);
}

void NcclAllReduce::allreduce(int rank, float * data, size_t n) {
    reduce(rank, data, n, nullptr);
}

void NcclAllReduce::allreduce(int rank, double * data, size_t n) {
    reduce(rank, data, n, nullptr);
}

void NcclAllReduce::allreduce_on_stream(int rank, float * data, size_t n, void * stream) {
    reduce(rank, data, n, static_cast<cudaStream_t>(stream));
}

void NcclAllReduce::allreduce_on_stream(int rank, double * data, size_t n, void * stream) {
    reduce(rank, data, n, static_cast<cudaStream_t>(stream));
}

// This process's state of a global rank; nullptr (the group failed) for another's.
NcclAllReduce::RankState * NcclAllReduce::local(int rank) {
    const int index = rank - first_rank_;
    if (index >= 0 && index < (int) ranks_.size()) return &ranks_[index];
    fail_and_abort(bad_rank_message(rank, n_ranks()) +
                   (ranks_.size() < (size_t) total_ranks_ ? " (or not one of this process's)" : ""));
    return nullptr;
}

void NcclAllReduce::reduce(int rank, float * data, size_t n, cudaStream_t stream) {
    RankState * state = local(rank);
    if (!state || failed() || n == 0) return;
    RankState & me = *state;
    const cudaStream_t s = stream ? stream : me.stream->get();
    try {
        CurrentDevice current(me.device);
        if (wire_of_call(wire_, bf16_min_bytes_, n * sizeof(float)) == WireType::F32) {
            queue_sum(me, data, n, ncclFloat32, s);
        } else {
            void * wire = scratch(me, n * 2);
            check_cuda(launch_to_wire(data, wire, n, WireType::BF16, s), "rounding to BF16", me.device);
            queue_sum(me, wire, n, ncclBfloat16, s);
            check_cuda(launch_from_wire(wire, data, n, WireType::BF16, s), "widening from BF16", me.device);
        }
    } catch (const Error & e) {
        fail_and_abort(std::string("allreduce: ") + e.what());
        return;
    }
    if (!stream) finish(rank, me);
}

void NcclAllReduce::reduce(int rank, double * data, size_t n, cudaStream_t stream) {
    RankState * state = local(rank);
    if (!state || failed() || n == 0) return;
    RankState & me = *state;
    try {
        CurrentDevice current(me.device);
        queue_sum(me, data, n, ncclFloat64, stream ? stream : me.stream->get());
    } catch (const Error & e) {
        fail_and_abort(std::string("allreduce: ") + e.what());
        return;
    }
    if (!stream) finish(rank, me);
}

// In place on the stream; nothing once the group has failed.
void NcclAllReduce::queue_sum(RankState & me, void * data, size_t n, ncclDataType_t type, cudaStream_t stream) {
    std::shared_lock<std::shared_mutex> comms(comms_mutex_);
    if (aborted_) return;
    check_nccl(ncclAllReduce(data, data, n, type, ncclSum, me.comm, stream), "ncclAllReduce");
}

// Waits for the rank's own stream; a call that does not end fails the group.
void NcclAllReduce::finish(int rank, RankState & me) {
    try {
        if (!wait_for_stream(me.stream->get(), me.device, timeout_s_, failure_.flag()) && !failed()) {
            char why[160];
            std::snprintf(why, sizeof why,
                          "allreduce: an NCCL sum on rank %d did not complete within %.1f s (a rank did not join it)",
                          rank, timeout_s_);
            fail_and_abort(why);
        }
    } catch (const Error & e) {
        fail_and_abort(std::string("allreduce: ") + e.what());
    }
}

void NcclAllReduce::release_scratch(RankState & r) {
    for (void * old : r.retired) (void) cudaFree(old);
    r.retired.clear();
    if (r.scratch) (void) cudaFree(r.scratch);
    r.scratch = nullptr;
}

// Grows by doubling: an allocation may wait for the device, which must stay rare.
void * NcclAllReduce::scratch(RankState & r, size_t bytes) {
    if (r.scratch_bytes >= bytes) return r.scratch;
    const size_t grown = std::max(bytes, 2 * r.scratch_bytes);
    if (r.scratch) r.retired.push_back(r.scratch);
    r.scratch = nullptr;
    r.scratch_bytes = 0;
    check_cuda(cudaMalloc(&r.scratch, grown), "cudaMalloc of the BF16 wire buffer", r.device);
    r.scratch_bytes = grown;
    return r.scratch;
}

void NcclAllReduce::abort(const std::string & why) {
    fail_and_abort(why);
}

// Marks the group failed (no rank queues a sum after that), then takes every
// rank out of NCCL once no thread is inside a call.
void NcclAllReduce::fail_and_abort(const std::string & why) {
    failure_.fail([&] { return why; });
    std::unique_lock<std::shared_mutex> lock(comms_mutex_);
    if (aborted_) return;
    aborted_ = true;
    for (RankState & r : ranks_) ncclCommAbort(r.comm);
}

}  // namespace llama_tp
