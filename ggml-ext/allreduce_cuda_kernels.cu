#include "ggml-ext/allreduce_cuda_kernels.h"

namespace llama_tp {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) {
    const size_t blocks = (n + kThreads - 1) / kThreads;
    return (unsigned) (blocks < 65535 ? blocks : 65535);  // a grid-stride loop covers the rest
}

// The bits of round_to_bf16 (allreduce_wire.h): to nearest, ties to even, NaN kept quiet.
__device__ uint16_t to_bf16(float x) {
    const uint32_t bits = __float_as_uint(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t) ((bits | 0x00400000u) >> 16);
    return (uint16_t) ((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__device__ float from_bf16(uint16_t h) {
    return __uint_as_float((uint32_t) h << 16);
}

__global__ void to_bf16_kernel(const float * src, uint16_t * dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
        dst[i] = to_bf16(src[i]);
    }
}

__global__ void add_f32_kernel(float * data, const float * peer, size_t n) {
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
        data[i] = data[i] + peer[i];
    }
}

__global__ void add_bf16_kernel(float * data, const uint16_t * peer, size_t n) {
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
        data[i] = from_bf16(to_bf16(data[i])) + from_bf16(peer[i]);
    }
}

__global__ void from_bf16_kernel(const uint16_t * src, float * data, size_t n) {
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
        data[i] = from_bf16(src[i]);
    }
}

__global__ void add_f64_kernel(double * data, const double * peer, size_t n) {
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
        data[i] = data[i] + peer[i];
    }
}

}  // namespace

cudaError_t launch_to_wire(const float * src, void * dst, size_t n, WireType wire, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    if (wire == WireType::F32) {
        return cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDefault, stream);
    }
    to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(src, static_cast<uint16_t *>(dst), n);
    return cudaGetLastError();
}

cudaError_t launch_add_wire(float * data, const void * peer, size_t n, WireType wire, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    if (wire == WireType::F32) {
        add_f32_kernel<<<blocks_for(n), kThreads, 0, stream>>>(data, static_cast<const float *>(peer), n);
    } else {
        add_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(data, static_cast<const uint16_t *>(peer), n);
    }
    return cudaGetLastError();
}

cudaError_t launch_from_wire(const void * src, float * data, size_t n, WireType wire, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    if (wire == WireType::F32) {
        return cudaMemcpyAsync(data, src, n * sizeof(float), cudaMemcpyDefault, stream);
    }
    from_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const uint16_t *>(src), data, n);
    return cudaGetLastError();
}

cudaError_t launch_add_exact(double * data, const double * peer, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    add_f64_kernel<<<blocks_for(n), kThreads, 0, stream>>>(data, peer, n);
    return cudaGetLastError();
}

}  // namespace llama_tp
