#include "ggml-ext/comm/cuda/allreduce_internal.h"

#include "ggml-ext/comm/allreduce_backoff.h"
#include "ggml-ext/comm/cuda/allreduce_cuda_kernels.h"
#include "ggml-ext/comm/allreduce_wire.h"
#include "ggml-ext/error.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

namespace llama_tp {
namespace {

void check_config(const AllReduceConfig & c) {
    if (c.memory != RankMemory::Cuda) throw Error("the ranks' values are in host memory");
    if (c.n_ranks != 2) throw Error("needs exactly 2 ranks, not " + std::to_string(c.n_ranks));
    if (c.cuda_devices.size() != 2) throw Error("needs the CUDA device of each of its 2 ranks");
}

// The engine's kernels read and write host memory directly, and order their
// stores to it with system-wide fences as Volta and later GPUs keep them.
void check_device(int device) {
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", device);
    if (!prop.canMapHostMemory) {
        throw Error("CUDA device " + std::to_string(device) + " (" + prop.name + ") cannot map host memory");
    }
#if !defined(LLAMA_TP_HAVE_HIP)
    if (prop.major < 7) {
        throw Error("needs compute capability 7.0 or later; CUDA device " + std::to_string(device) + " (" + prop.name +
                    ") has " + std::to_string(prop.major) + "." + std::to_string(prop.minor));
    }
#endif
}

}  // namespace

InternalAllReduce::InternalAllReduce(const AllReduceConfig & config)
    : wire_(config.wire), sizes_(config.gpu_sizes), timeout_s_(config.timeout_s) {
    check_config(config);
    for (int r = 0; r < 2; ++r) {
        RankState & s = ranks_[r];
        s.device = config.cuda_devices[r];
        check_device(s.device);
        s.stream = std::make_unique<CudaStream>(s.device);
        CurrentDevice current(s.device);
        check_cuda(load_engine_kernels(), "loading the engine's kernels", s.device);
        for (auto & slot : s.slots) slot = std::make_unique<MappedHostBuffer>(kChunkBytes, s.device);
    }
    stream_error_ = std::make_unique<MappedHostBuffer>(sizeof(int), ranks_[0].device);
    std::memset(stream_error_->host(), 0, sizeof(int));
}

bool InternalAllReduce::rounds_to_bf16() const {
    return rounds_any_call(wire_, sizes_.internal_bf16_min_bytes);
}

// The same on both ranks: it depends on the call's count and type only.
template <typename T>
InternalAllReduce::CallPath InternalAllReduce::path_of(size_t n) const {
    CallPath path;
    if (!std::is_same<T, double>::value) path.wire = wire_of_call(wire_, sizes_.internal_bf16_min_bytes, n * 4);
    const size_t bytes = n * (std::is_same<T, double>::value ? sizeof(double) : wire_bytes(path.wire));
    path.copy_engines = sizes_.internal_copy_min_bytes != 0 && bytes >= sizes_.internal_copy_min_bytes;
    path.chunk_bytes = sizes_.copy_chunk_bytes(bytes);
    return path;
}

// The copy engines' buffers at the first call that takes them (the first
// caller allocates, the other waits): sums of decode steps never do.
template <typename T>
bool InternalAllReduce::queue_through_copy_engines(int rank, T * data, size_t n, const CallPath & path,
                                                   cudaStream_t stream) {
    try {
        std::call_once(copy_allocated_, [this] {
            const int devices[2] = {ranks_[0].device, ranks_[1].device};
            copy_ = std::make_unique<CopyExchange>(devices, timeout_s_, failure_);
        });
    } catch (const Error & e) {
        failure_.fail([&] { return std::string("allreduce: ") + e.what(); });
        return false;
    }
    return copy_->queue(rank, data, n, path.wire, path.chunk_bytes, stream);
}

InternalAllReduce::~InternalAllReduce() {
    // A rank that gave up may have left a kernel reading the other's slot;
    // one queued on a stream of the caller's ends at the abort word.
    *static_cast<volatile int *>(stream_error_->host()) = kExchangeAborted;
    for (RankState & s : ranks_) {
        if (s.stream) (void) cudaStreamSynchronize(s.stream->get());
        CurrentDevice current(s.device);
        (void) cudaDeviceSynchronize();
    }
}

// Both ranks' slots and tokens for sums on a stream, at the first such call
// (the first caller allocates, the other waits): most groups never use them.
void InternalAllReduce::allocate_stream_sides() {
    for (int r = 0; r < 2; ++r) {
        const int device = ranks_[r].device;
        CurrentDevice current(device);
        StreamSide & side = stream_sides_[r];
        for (auto & slot : side.slots) slot = std::make_unique<MappedHostBuffer>(kChunkBytes, device);
        side.tokens = std::make_unique<MappedHostBuffer>(kExchangeBlocks * sizeof(uint64_t), device);
        side.counts = std::make_unique<MappedHostBuffer>(2 * kExchangeBlocks * sizeof(uint64_t), device);
        std::memset(side.tokens->host(), 0, side.tokens->bytes());
        std::memset(side.counts->host(), 0, side.counts->bytes());
        side.chunks_done = std::make_unique<DeviceBuffer>(kExchangeBlocks * sizeof(uint64_t), device);
        // On the engine's own stream, waited for: the kernels run on streams that do not wait for the default one.
        const cudaStream_t stream = ranks_[r].stream->get();
        check_cuda(cudaMemsetAsync(side.chunks_done->get(), 0, kExchangeBlocks * sizeof(uint64_t), stream),
                   "cudaMemsetAsync", device);
        check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", device);
    }
}

int InternalAllReduce::stream_error() const {
    return *static_cast<const volatile int *>(stream_error_->host());
}

bool InternalAllReduce::failed() const {
    return failure_.failed() || stream_error() != kExchangeOk;
}

std::string InternalAllReduce::error() const {
    if (failure_.failed()) return failure_.message();
    switch (stream_error()) {
        case kExchangeTimeout:
            return "allreduce: the internal engine's sum on a stream waited longer than " +
                   std::to_string((int) timeout_s_) + " s for the other rank";
        case kExchangeMismatch:
            return "allreduce: ranks called with different element counts or types (internal engine, on a stream)";
        case kExchangeAborted:
            return "allreduce: the internal engine was aborted";
        default:
            return "";
    }
}

void InternalAllReduce::abort(const std::string & why) {
    failure_.fail([&] { return why; });
    *static_cast<volatile int *>(stream_error_->host()) = kExchangeAborted;
}

template <typename T>
void InternalAllReduce::queue(int rank, T * data, size_t n, void * stream) {
    if (rank < 0 || rank > 1) {
        failure_.fail([&] { return bad_rank_message(rank, 2); });
        return;
    }
    if (failed()) return;
    const CallPath path = path_of<T>(n);
    if (path.copy_engines) {
        cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &capturing) == cudaSuccess &&
            capturing != cudaStreamCaptureStatusNone) {
            abort(
                "allreduce: the internal engine's copy engines cannot be captured into a CUDA graph "
                "(LLAMA_TP_INTERNAL_COPY_MIN_BYTES=0 keeps every sum in its kernels)");
            return;
        }
        queue_through_copy_engines(rank, data, n, path, static_cast<cudaStream_t>(stream));
        return;
    }
    try {
        std::call_once(stream_sides_allocated_, [this] { allocate_stream_sides(); });
    } catch (const Error & e) {
        abort(std::string("allreduce: ") + e.what());
        return;
    }
    StreamSide & me = stream_sides_[rank];
    const StreamSide & peer = stream_sides_[1 - rank];
    ExchangeArgs a{};
    a.data = data;
    a.n = n;
    a.element_size = sizeof(T);
    a.wire = path.wire;
    a.chunk_elems = kChunkBytes / (std::is_same<T, double>::value ? sizeof(double) : wire_bytes(path.wire));
    a.n_chunks = exchange_chunks(n, a.chunk_elems);
    a.chunks_done = static_cast<uint64_t *>(me.chunks_done->get());
    for (int p = 0; p < 2; ++p) {
        a.me.slots[p] = me.slots[p]->device();
        a.peer.slots[p] = peer.slots[p]->device();
    }
    a.me.tokens = static_cast<volatile uint64_t *>(me.tokens->device());
    a.me.counts = static_cast<volatile uint64_t *>(me.counts->device());
    a.peer.tokens = static_cast<volatile uint64_t *>(peer.tokens->device());
    a.peer.counts = static_cast<volatile uint64_t *>(peer.counts->device());
    a.error = static_cast<volatile int *>(stream_error_->device());
    // clock64 counts the SM's cycles: at most about 3 GHz.
    a.spin_limit_cycles = (long long) (timeout_s_ * 3e9);
    try {
        CurrentDevice current(ranks_[rank].device);
        check_cuda(launch_exchange(a, static_cast<cudaStream_t>(stream)), "queueing the internal engine's sum",
                   ranks_[rank].device);
    } catch (const Error & e) {
        abort(std::string("allreduce: ") + e.what());
    }
}

template void InternalAllReduce::queue<float>(int, float *, size_t, void *);
template void InternalAllReduce::queue<double>(int, double *, size_t, void *);

template <typename T>
void InternalAllReduce::run(int rank, T * data, size_t n) {
    if (rank < 0 || rank > 1) {
        failure_.fail([&] { return bad_rank_message(rank, 2); });
        return;
    }
    if (failed()) return;
    const CallPath path = path_of<T>(n);
    const size_t wire_size = std::is_same<T, double>::value ? sizeof(double) : wire_bytes(path.wire);
    const size_t per_chunk = kChunkBytes / wire_size;
    // A call of 0 values still exchanges one empty chunk: both ranks stay at
    // the same chunk, and the counts are compared.
    const size_t n_chunks = std::max<size_t>(1, (n + per_chunk - 1) / per_chunk);
    RankState & me = ranks_[rank];
    try {
        CurrentDevice current(me.device);
        bool ok = true;
        if (path.copy_engines) {
            ok = queue_through_copy_engines(rank, data, n, path, me.stream->get());
        } else {
            for (size_t c = 0; c < n_chunks && ok; ++c) {
                const size_t begin = c * per_chunk;
                ok = exchange_chunk(rank, data + begin, n, std::min(per_chunk, n - begin), path.wire);
            }
        }
        if (ok && !wait_for_stream(me.stream->get(), me.device, timeout_s_, failure_.flag()) && !failed()) {
            failure_.fail([&] { return std::string("allreduce: the internal engine's sum did not finish in time"); });
        }
    } catch (const Error & e) {
        failure_.fail([&] { return std::string("allreduce: ") + e.what(); });
    }
    // Given up or not, this rank's own kernels and copies end before its
    // values are used (none of them waits for the other rank: bounded).
    if (failed()) {
        (void) cudaStreamSynchronize(me.stream->get());
        if (path.copy_engines && copy_) copy_->drain(rank);
    }
}

template void InternalAllReduce::run<float>(int, float *, size_t);
template void InternalAllReduce::run<double>(int, double *, size_t);

// One chunk of len values at data (of a call of n): false when the group failed.
template <typename T>
bool InternalAllReduce::exchange_chunk(int rank, T * data, size_t n, size_t len, WireType wire) {
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
        check_cuda(launch_to_wire(data, me.slots[parity]->device(), len, wire, stream), "putting a chunk on the wire",
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
    const std::string mismatch = call_mismatch({rank, n, sizeof(T)}, {1 - rank, theirs.n, theirs.element_size});
    if (!mismatch.empty()) {
        failure_.fail([&] { return mismatch; });
        return false;
    }
    if constexpr (std::is_same<T, double>::value) {
        check_cuda(launch_add_exact(data, static_cast<const double *>(peer.slots[parity]->device()), len, stream),
                   "adding the other rank's chunk", me.device);
    } else {
        check_cuda(launch_add_wire(data, peer.slots[parity]->device(), len, wire, stream),
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
