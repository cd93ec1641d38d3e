#include "ggml-ext/allreduce_internal.h"

#include "ggml-ext/allreduce_backoff.h"
#include "ggml-ext/allreduce_cuda_kernels.h"
#include "ggml-ext/error.h"

#include <algorithm>
#include <string>
#include <type_traits>

namespace llama_tp {
namespace {

void check_config(const AllReduceConfig & c) {
    if (c.memory != RankMemory::Cuda) throw Error("the ranks' values are in host memory");
    if (c.n_ranks != 2) throw Error("needs exactly 2 ranks, not " + std::to_string(c.n_ranks));
    if (c.cuda_devices.size() != 2) throw Error("needs the CUDA device of each of its 2 ranks");
}

// The engine's kernels read and write host memory directly.
void check_device(int device) {
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", device);
    if (!prop.canMapHostMemory) {
        throw Error("CUDA device " + std::to_string(device) + " (" + prop.name + ") cannot map host memory");
    }
}

}  // namespace

InternalAllReduce::InternalAllReduce(const AllReduceConfig & config)
    : wire_(config.wire), timeout_s_(config.timeout_s) {
    check_config(config);
    for (int r = 0; r < 2; ++r) {
        RankState & s = ranks_[r];
        s.device = config.cuda_devices[r];
        check_device(s.device);
        s.stream = std::make_unique<CudaStream>(s.device);
        CurrentDevice current(s.device);
        for (auto & slot : s.slots) slot = std::make_unique<MappedHostBuffer>(kChunkBytes, s.device);
    }
}

InternalAllReduce::~InternalAllReduce() {
    // A rank that gave up may have left a kernel reading the other's slot.
    for (RankState & s : ranks_) {
        if (s.stream) (void) cudaStreamSynchronize(s.stream->get());
    }
}

template <typename T>
void InternalAllReduce::run(int rank, T * data, size_t n) {
    if (rank < 0 || rank > 1) {
        failure_.fail([&] { return bad_rank_message(rank, 2); });
        return;
    }
    if (failed()) return;
    const size_t wire_size = std::is_same<T, double>::value ? sizeof(double) : wire_bytes(wire_);
    const size_t per_chunk = kChunkBytes / wire_size;
    // A call of 0 values still exchanges one empty chunk: both ranks stay at
    // the same chunk, and the counts are compared.
    const size_t n_chunks = std::max<size_t>(1, (n + per_chunk - 1) / per_chunk);
    RankState & me = ranks_[rank];
    try {
        CurrentDevice current(me.device);
        bool ok = true;
        for (size_t c = 0; c < n_chunks && ok; ++c) {
            const size_t begin = c * per_chunk;
            ok = exchange_chunk(rank, data + begin, n, std::min(per_chunk, n - begin));
        }
        if (ok && !wait_for_stream(me.stream->get(), me.device, timeout_s_, failure_.flag()) && !failed()) {
            failure_.fail([&] { return std::string("allreduce: the internal engine's sum did not finish in time"); });
        }
    } catch (const Error & e) {
        failure_.fail([&] { return std::string("allreduce: ") + e.what(); });
    }
    // Given up or not, this rank's own kernels end before its values are used
    // (none of them waits for the other rank, so this is bounded).
    if (failed()) (void) cudaStreamSynchronize(me.stream->get());
}

template void InternalAllReduce::run<float>(int, float *, size_t);
template void InternalAllReduce::run<double>(int, double *, size_t);

// One chunk of len values at data (of a call of n): false when the group failed.
template <typename T>
bool InternalAllReduce::exchange_chunk(int rank, T * data, size_t n, size_t len) {
    RankState & me = ranks_[rank];
    RankState & peer = ranks_[1 - rank];
    const uint64_t chunk = ++me.chunks;
    const int parity = (int) (chunk % 2);
    cudaStream_t stream = me.stream->get();
    me.counts[parity] = {n, sizeof(T)};
    if constexpr (std::is_same<T, double>::value) {
        check_cuda(cudaMemcpyAsync(me.slots[parity]->device(), data, len * sizeof(double), cudaMemcpyDefault, stream),
                   "copying a chunk to host memory", me.device);
    } else {
        check_cuda(launch_to_wire(data, me.slots[parity]->device(), len, wire_, stream), "putting a chunk on the wire",
                   me.device);
    }
    // The slot's values, and the previous chunk's reads of the other slot, are done.
    if (!wait_for_stream(stream, me.device, timeout_s_, failure_.flag())) {
        if (!failed()) failure_.fail([&] { return std::string("allreduce: copying to host memory did not finish"); });
        return false;
    }
    me.published.store(chunk, std::memory_order_release);
    if (!await_peer(rank, chunk)) return false;
    const ChunkCount theirs = peer.counts[parity];
    if (theirs.n != n || theirs.element_size != sizeof(T)) {
        failure_.fail([&] {
            if (theirs.element_size != sizeof(T)) {
                return mismatched_types_message({{rank, sizeof(T)}, {1 - rank, theirs.element_size}});
            }
            return mismatched_counts_message({{rank, n}, {1 - rank, theirs.n}});
        });
        return false;
    }
    if constexpr (std::is_same<T, double>::value) {
        check_cuda(launch_add_exact(data, static_cast<const double *>(peer.slots[parity]->device()), len, stream),
                   "adding the other rank's chunk", me.device);
    } else {
        check_cuda(launch_add_wire(data, peer.slots[parity]->device(), len, wire_, stream),
                   "adding the other rank's chunk", me.device);
    }
    return true;
}

bool InternalAllReduce::await_peer(int rank, uint64_t chunk) {
    const RankState & peer = ranks_[1 - rank];
    Backoff backoff(timeout_s_);
    while (peer.published.load(std::memory_order_acquire) < chunk) {
        if (failed()) return false;
        if (!backoff.pause()) {
            failure_.fail([&] { return missing_ranks_message({1 - rank}, timeout_s_, 2); });
            return false;
        }
    }
    return true;
}

}  // namespace llama_tp
