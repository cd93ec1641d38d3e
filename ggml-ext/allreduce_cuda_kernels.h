#pragma once
// The element-wise kernels of the GPU engines: values onto the wire (F32 as
// they are, BF16 rounded as round_to_bf16 in allreduce_wire.h rounds, bit for
// bit) and a peer's wire values added to a rank's own. Each launches on the
// given stream and returns at once, with the launch's status. CUDA builds only.

#include "ggml-ext/allreduce_engine.h"

#include "ggml-ext/gpu_runtime_api.h"

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

}  // namespace llama_tp
