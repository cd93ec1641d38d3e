#include "ggml-ext/comm/cuda/allreduce_copy_exchange.h"

#include "ggml-ext/comm/allreduce_backoff.h"
#include "ggml-ext/comm/cuda/allreduce_cuda_kernels.h"
#include "ggml-ext/comm/cuda/allreduce_sizes.h"
#include "ggml-ext/error.h"

#include <algorithm>
#include <string>
#include <type_traits>

namespace llama_tp {

CopyExchange::CopyExchange(const int devices[2], double timeout_s, GroupFailure & failure)
    : timeout_s_(timeout_s), failure_(failure), max_chunks_(kPieceBytes / GpuAllReduceSizes::kMinCopyChunkBytes) {
    for (int r = 0; r < 2; ++r) {
        Side & side = sides_[r];
        side.device = devices[r];
        side.copy_out = std::make_unique<CudaStream>(side.device);
        side.copy_in = std::make_unique<CudaStream>(side.device);
        CurrentDevice current(side.device);
        for (PieceSet & set : side.sets) {
            set.ring = std::make_unique<MappedHostBuffer>(kPieceBytes, side.device);
            set.wire_out = std::make_unique<DeviceBuffer>(kPieceBytes, side.device);
            set.wire_in = std::make_unique<DeviceBuffer>(kPieceBytes, side.device);
            for (size_t c = 0; c < max_chunks_; ++c) {
                set.copied_out.push_back(std::make_unique<CudaEvent>(side.device));
                set.copied_in.push_back(std::make_unique<CudaEvent>(side.device));
            }
            for (auto * e : {&set.ready, &set.out_done, &set.in_done, &set.added}) {
                *e = std::make_unique<CudaEvent>(side.device);
            }
        }
    }
}

CopyExchange::~CopyExchange() {
    // Queued copies may still read or write the buffers.
    for (Side & side : sides_) {
        CurrentDevice current(side.device);
        (void) cudaDeviceSynchronize();
    }
}

void CopyExchange::wait(cudaStream_t stream, const CudaEvent & event, int device) {
    check_cuda(cudaStreamWaitEvent(stream, event.get(), 0), "cudaStreamWaitEvent", device);
}

void CopyExchange::record(const CudaEvent & event, cudaStream_t stream, int device) {
    check_cuda(cudaEventRecord(event.get(), stream), "cudaEventRecord", device);
}

bool CopyExchange::await(const std::atomic<uint64_t> & counter, uint64_t want, int waited_rank) {
    Backoff backoff(timeout_s_);
    while (counter.load(std::memory_order_acquire) < want) {
        if (failure_.failed()) return false;
        if (!backoff.pause()) {
            failure_.fail([&] { return missing_ranks_message({waited_rank}, timeout_s_, 2); });
            return false;
        }
    }
    return true;
}

void CopyExchange::drain(int rank) {
    Side & side = sides_[rank];
    (void) cudaStreamSynchronize(side.copy_out->get());
    (void) cudaStreamSynchronize(side.copy_in->get());
}

// Chunks of chunk_bytes, at most max_chunks_ of them (longer ones where the cap binds).
CopyExchange::Piece CopyExchange::piece(int rank, size_t begin, size_t len, size_t wire_size, size_t chunk_bytes) {
    Piece p;
    p.number = ++sides_[rank].pieces;
    p.begin = begin;
    p.len = len;
    p.wire_size = wire_size;
    const size_t chunk = std::max<size_t>(1, std::min(chunk_bytes, kPieceBytes) / wire_size);
    p.chunk_len = std::max(chunk, (len + max_chunks_ - 1) / max_chunks_);
    p.n_chunks = (len + p.chunk_len - 1) / p.chunk_len;
    return p;
}

CopyExchange::PieceSides CopyExchange::sides_of(int rank, const Piece & p) {
    Side & me = sides_[rank];
    const Side & peer = sides_[1 - rank];
    return {me, peer, me.sets[p.number % 2], peer.sets[p.number % 2]};
}

template <typename T>
bool CopyExchange::queue(int rank, T * data, size_t n, WireType wire, size_t chunk_bytes, cudaStream_t stream) {
    const size_t wire_size = std::is_same<T, double>::value ? sizeof(double) : wire_bytes(wire);
    const size_t per_piece = kPieceBytes / wire_size;
    try {
        CurrentDevice current(sides_[rank].device);
        Piece in_flight = piece(rank, 0, std::min(per_piece, n), wire_size, chunk_bytes);
        if (!send(rank, data, n, in_flight, wire, stream)) return false;
        for (;;) {
            const size_t next = in_flight.begin + in_flight.len;
            if (next < n) {
                const Piece following = piece(rank, next, std::min(per_piece, n - next), wire_size, chunk_bytes);
                if (!send(rank, data, n, following, wire, stream)) return false;
                if (!receive(rank, data, n, in_flight, wire, stream)) return false;
                in_flight = following;
            } else {
                return receive(rank, data, n, in_flight, wire, stream);
            }
        }
    } catch (const Error & e) {
        failure_.fail([&] { return std::string("allreduce: ") + e.what(); });
    }
    return false;
}

template bool CopyExchange::queue<float>(int, float *, size_t, WireType, size_t, cudaStream_t);
template bool CopyExchange::queue<double>(int, double *, size_t, WireType, size_t, cudaStream_t);

template <typename T>
bool CopyExchange::send(int rank, T * data, size_t n, const Piece & p, WireType wire, cudaStream_t stream) {
    auto [me, peer, mine, theirs] = sides_of(rank, p);
    const int device = me.device;
    const size_t wire_size = p.wire_size;
    const cudaStream_t out = me.copy_out->get();

    // The other GPU has read this set's ring (piece p - 2) once its in_done has passed.
    if (p.number > 2) {
        if (!await(peer.fetched, p.number - 2, 1 - rank)) return false;
        wait(out, *theirs.in_done, device);
    }
    // The values to copy out: the caller's, or rounded to BF16 on the stream
    // (into wire_out, once its last copy out has ended).
    const void * src = data + p.begin;
    if constexpr (!std::is_same<T, double>::value) {
        if (wire == WireType::BF16) {
            if (p.number > 2) wait(stream, *mine.out_done, device);
            check_cuda(launch_to_wire(data + p.begin, mine.wire_out->get(), p.len, wire, stream),
                       "putting a chunk on the wire", device);
            src = mine.wire_out->get();
        }
    }
    record(*mine.ready, stream, device);
    wait(out, *mine.ready, device);
    for (size_t c = 0; c < p.n_chunks; ++c) {
        const size_t lo = c * p.chunk_len;
        check_cuda(cudaMemcpyAsync(static_cast<char *>(mine.ring->host()) + lo * wire_size,
                                   static_cast<const char *>(src) + lo * wire_size, p.count(c) * wire_size,
                                   cudaMemcpyDeviceToHost, out),
                   "copying a chunk to host memory", device);
        record(*mine.copied_out[c], out, device);
    }
    record(*mine.out_done, out, device);
    mine.n = n;
    mine.element_size = sizeof(T);
    me.queued.store(p.number, std::memory_order_release);
    return true;
}

template <typename T>
bool CopyExchange::receive(int rank, T * data, size_t n, const Piece & p, WireType wire, cudaStream_t stream) {
    auto [me, peer, mine, theirs] = sides_of(rank, p);
    const int device = me.device;
    const size_t wire_size = p.wire_size;
    const cudaStream_t in = me.copy_in->get();

    if (!await(peer.queued, p.number, 1 - rank)) return false;
    const std::string mismatch = call_mismatch({rank, n, sizeof(T)}, {1 - rank, theirs.n, theirs.element_size});
    if (!mismatch.empty()) {
        failure_.fail([&] { return mismatch; });
        return false;
    }
    // wire_in is free once this rank's adds of piece p - 2 have run.
    if (p.number > 2) wait(in, *mine.added, device);
    for (size_t c = 0; c < p.n_chunks; ++c) {
        const size_t lo = c * p.chunk_len;
        wait(in, *theirs.copied_out[c], device);
        check_cuda(cudaMemcpyAsync(static_cast<char *>(mine.wire_in->get()) + lo * wire_size,
                                   static_cast<const char *>(theirs.ring->host()) + lo * wire_size,
                                   p.count(c) * wire_size, cudaMemcpyHostToDevice, in),
                   "copying a chunk from host memory", device);
        record(*mine.copied_in[c], in, device);
    }
    record(*mine.in_done, in, device);
    me.fetched.store(p.number, std::memory_order_release);

    for (size_t c = 0; c < p.n_chunks; ++c) {
        const size_t lo = c * p.chunk_len;
        wait(stream, *mine.copied_in[c], device);
        wait(stream, *mine.copied_out[c], device);  // the add overwrites what was copied out
        const void * peer_values = static_cast<const char *>(mine.wire_in->get()) + lo * wire_size;
        if constexpr (std::is_same<T, double>::value) {
            check_cuda(
                launch_add_exact(data + p.begin + lo, static_cast<const double *>(peer_values), p.count(c), stream),
                "adding the other rank's chunk", device);
        } else {
            check_cuda(launch_add_wire(data + p.begin + lo, peer_values, p.count(c), wire, stream),
                       "adding the other rank's chunk", device);
        }
    }
    record(*mine.added, stream, device);
    return true;
}

}  // namespace llama_tp
