#include "ggml-ext/allreduce_nccl.h"

#include "ggml-ext/allreduce_cuda_kernels.h"
#include "ggml-ext/error.h"

#include <cstdlib>
#include <string>

namespace llama_tp {
namespace {

void check_nccl(ncclResult_t status, const char * what) {
    if (status != ncclSuccess) throw Error(std::string(what) + ": " + ncclGetErrorString(status));
}

size_t bf16_min_bytes() {
    const char * v = std::getenv("LLAMA_TP_NCCL_BF16_MIN_BYTES");
    if (!v || !*v) return 65536;
    char * end = nullptr;
    const unsigned long long bytes = std::strtoull(v, &end, 10);
    if (*end != '\0') throw Error(std::string("LLAMA_TP_NCCL_BF16_MIN_BYTES must be a byte count, not '") + v + "'");
    return (size_t) bytes;
}

}  // namespace

NcclAllReduce::NcclAllReduce(const AllReduceConfig & config)
    : wire_(config.wire), timeout_s_(config.timeout_s), bf16_min_bytes_(bf16_min_bytes()) {
    if (config.memory != RankMemory::Cuda) throw Error("the ranks' values are in host memory");
    if ((int) config.cuda_devices.size() != config.n_ranks) {
        throw Error("needs one CUDA device per rank (" + std::to_string(config.cuda_devices.size()) + " for " +
                    std::to_string(config.n_ranks) + " ranks)");
    }
    std::vector<ncclComm_t> comms(config.cuda_devices.size());
    check_nccl(ncclCommInitAll(comms.data(), (int) comms.size(), config.cuda_devices.data()), "ncclCommInitAll");
    ranks_.resize(comms.size());
    for (size_t r = 0; r < comms.size(); ++r) {
        ranks_[r].device = config.cuda_devices[r];
        ranks_[r].comm = comms[r];
    }
    try {
        for (RankState & r : ranks_) r.stream = std::make_unique<CudaStream>(r.device);
    } catch (...) {
        for (RankState & r : ranks_) ncclCommDestroy(r.comm);
        throw;
    }
}

NcclAllReduce::~NcclAllReduce() {
    for (RankState & r : ranks_) {
        if (!aborted_) ncclCommDestroy(r.comm);
        if (r.scratch) {
            CurrentDevice current(r.device);
            cudaFree(r.scratch);
        }
    }
}

void NcclAllReduce::allreduce(int rank, float * data, size_t n) {
    if (rank < 0 || rank >= n_ranks()) {
        fail_and_abort(bad_rank_message(rank, n_ranks()));
        return;
    }
    if (wire_ != WireType::BF16 || n * sizeof(float) < bf16_min_bytes_) {
        sum(rank, data, n, ncclFloat32);
        return;
    }
    RankState & me = ranks_[rank];
    try {
        CurrentDevice current(me.device);
        void * wire = scratch(me, n * 2);
        check_cuda(launch_to_wire(data, wire, n, WireType::BF16, me.stream->get()), "rounding to BF16", me.device);
        sum(rank, wire, n, ncclBfloat16);
        if (failed()) return;
        check_cuda(launch_from_wire(wire, data, n, WireType::BF16, me.stream->get()), "widening from BF16", me.device);
        if (!wait_for_stream(me.stream->get(), me.device, timeout_s_, failure_.flag())) {
            fail_and_abort("allreduce: widening the BF16 sum did not finish in time");
        }
    } catch (const Error & e) {
        fail_and_abort(std::string("allreduce: ") + e.what());
    }
}

void NcclAllReduce::allreduce(int rank, double * data, size_t n) {
    if (rank < 0 || rank >= n_ranks()) {
        fail_and_abort(bad_rank_message(rank, n_ranks()));
        return;
    }
    sum(rank, data, n, ncclFloat64);
}

// In place on the rank's stream, waited for; every failure fails the group.
void NcclAllReduce::sum(int rank, void * data, size_t n, ncclDataType_t type) {
    if (failed() || n == 0) return;
    RankState & me = ranks_[rank];
    try {
        CurrentDevice current(me.device);
        check_nccl(ncclAllReduce(data, data, n, type, ncclSum, me.comm, me.stream->get()), "ncclAllReduce");
        if (!wait_for_stream(me.stream->get(), me.device, timeout_s_, failure_.flag()) && !failed()) {
            fail_and_abort("allreduce: an NCCL sum did not complete within " + std::to_string(timeout_s_) +
                           " s (a rank did not join it)");
        }
    } catch (const Error & e) {
        fail_and_abort(std::string("allreduce: ") + e.what());
    }
}

void * NcclAllReduce::scratch(RankState & r, size_t bytes) {
    if (r.scratch_bytes >= bytes) return r.scratch;
    if (r.scratch) check_cuda(cudaFree(r.scratch), "cudaFree", r.device);
    r.scratch = nullptr;
    r.scratch_bytes = 0;
    check_cuda(cudaMalloc(&r.scratch, bytes), "cudaMalloc of the BF16 wire buffer", r.device);
    r.scratch_bytes = bytes;
    return r.scratch;
}

void NcclAllReduce::abort(const std::string & why) {
    fail_and_abort(why);
}

// Marks the group failed, then takes every rank out of NCCL.
void NcclAllReduce::fail_and_abort(const std::string & why) {
    failure_.fail([&] { return why; });
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_) return;
    aborted_ = true;
    for (RankState & r : ranks_) ncclCommAbort(r.comm);
}

}  // namespace llama_tp
