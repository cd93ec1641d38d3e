#pragma once
// The element-wise kernels of the GPU engines: values onto the wire (F32 as
// they are, BF16 rounded as round_to_bf16 in allreduce_wire.h rounds, bit for
// bit) and a peer's wire values added to a rank's own. Each launches on the
// given stream and returns at once, with the launch's status. CUDA builds only.

#include "ggml-ext/comm/allreduce_engine.h"

#include "ggml-ext/gpu/gpu_runtime_api.h"

#include <cstddef>
#include <cstdint>

namespace llama_tp {

// Bytes one element takes on the wire.
inline size_t wire_bytes(WireType wire) {
    return wire == WireType::BF16 ? 2 : 4;
}

// dst (wire values, any memory a kernel can write: device or mapped host) = src on the wire.
cudaError_t launch_to_wire(const float * src, void * dst, size_t n, WireType wire, cudaStream_t stream);
// data[i] = wire(data[i]) + peer[i], peer holding wire values; both ranks get the same bits.
cudaError_t launch_add_wire(float * data, const void * peer, size_t n, WireType wire, cudaStream_t stream);
// data[i] = wire values of src, back to F32 (after a sum on the wire).
cudaError_t launch_from_wire(const void * src, float * data, size_t n, WireType wire, cudaStream_t stream);
// Doubles cross exactly: data[i] += peer[i].
cudaError_t launch_add_exact(double * data, const double * peer, size_t n, cudaStream_t stream);

// One rank's side of the internal engine's sum on its stream, for values
// already on the device: each of kExchangeBlocks blocks puts its share of a
// chunk into this rank's slot (page-locked host memory both ranks map), marks
// its token with the chunk's number, waits for the peer's token of the same
// block and chunk, and adds the peer's share. A block writes a slot again only
// once the peer's block has marked the next chunk (it has read that slot by
// then). Both ranks add the same two wire values: the same bits. A wait longer
// than the limit, a peer with another element count, or the abort word ends
// the kernel with the error word set (ExchangeError); values are then partial.
// A launch keeps no state of its own call: it may be captured and replayed.
constexpr int kExchangeBlocks = 32;
enum ExchangeError : int { kExchangeOk = 0, kExchangeTimeout = 1, kExchangeMismatch = 2, kExchangeAborted = 3 };
struct ExchangeSide {
    void * slots[2];             // mapped host, chunk_elems wire values each
    volatile uint64_t * tokens;  // [kExchangeBlocks]: the last chunk each block put out
    volatile uint64_t * counts;  // [kExchangeBlocks][2]: element count and size per chunk parity
};
struct ExchangeArgs {
    void * data;  // the rank's device values (float, or double when element_size is 8)
    size_t n;
    size_t element_size;
    WireType wire;  // F32 or BF16 for floats; doubles cross as they are
    size_t chunk_elems;
    uint64_t n_chunks;  // exchange_chunks(n, chunk_elems)
    // [kExchangeBlocks], device memory of this rank: the chunks each block has
    // numbered so far. The kernel reads and advances it, so that a launch
    // captured into a CUDA graph numbers its chunks anew at every replay.
    uint64_t * chunks_done;
    ExchangeSide me, peer;
    volatile int * error;         // mapped host: ExchangeError, shared by both ranks
    long long spin_limit_cycles;  // a wait longer than this fails
};
cudaError_t launch_exchange(const ExchangeArgs & args, cudaStream_t stream);
// Loads every kernel of this file on the current device now: CUDA loads a
// kernel at its first launch, and a load may wait for the device's running
// kernels (the other rank's exchange, spinning).
cudaError_t load_engine_kernels();
// The number of chunks launch_exchange uses for a call.
inline uint64_t exchange_chunks(size_t n, size_t chunk_elems) {
    return n == 0 ? 1 : (n + chunk_elems - 1) / chunk_elems;
}

}  // namespace llama_tp
