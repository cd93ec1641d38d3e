#include "ggml-ext/comm/cuda/allreduce_cuda_kernels.h"

#include "ggml-ext/gpu/cuda_runtime.h"

namespace llama_tp {
namespace {

constexpr int kThreads = 256;

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

// Spins until *token >= want; false on the limit or an error word set by anyone.
__device__ bool await_token(const volatile uint64_t * token, uint64_t want, volatile int * error, long long limit) {
    const long long start = clock64();
    while (*token < want) {
        if (*error != kExchangeOk) return false;
        if (clock64() - start > limit) {
            *error = kExchangeTimeout;
            return false;
        }
    }
    return true;
}

__global__ void exchange_kernel(ExchangeArgs a) {
    const int b = blockIdx.x;
    // Only this block of this rank writes its count, after every thread has read it.
    const uint64_t first_chunk = a.chunks_done[b] + 1;
    __syncthreads();
    if (threadIdx.x == 0) a.chunks_done[b] = first_chunk - 1 + a.n_chunks;
    for (uint64_t c = 0; c < a.n_chunks; ++c) {
        const uint64_t chunk = first_chunk + c;
        const int parity = (int) (chunk & 1);
        const size_t chunk_begin = c * a.chunk_elems;
        const size_t len = a.n - chunk_begin < a.chunk_elems ? a.n - chunk_begin : a.chunk_elems;
        const size_t lo = len * b / kExchangeBlocks, hi = len * (b + 1) / kExchangeBlocks;
        // The peer's block has read this slot (it marked the chunk after the one that used it).
        if (threadIdx.x == 0) (void) await_token(a.peer.tokens + b, chunk - 1, a.error, a.spin_limit_cycles);
        __syncthreads();
        if (*a.error != kExchangeOk) return;
        if (a.element_size == 8) {
            const double * src = static_cast<const double *>(a.data) + chunk_begin;
            volatile double * slot = static_cast<volatile double *>(a.me.slots[parity]);
            for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) slot[i] = src[i];
        } else if (a.wire == WireType::BF16) {
            const float * src = static_cast<const float *>(a.data) + chunk_begin;
            volatile uint16_t * slot = static_cast<volatile uint16_t *>(a.me.slots[parity]);
            for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) slot[i] = to_bf16(src[i]);
        } else {
            const float * src = static_cast<const float *>(a.data) + chunk_begin;
            volatile float * slot = static_cast<volatile float *>(a.me.slots[parity]);
            for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) slot[i] = src[i];
        }
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
            a.me.counts[2 * b + parity] = (uint64_t) a.n * 16 + a.element_size;
            __threadfence_system();
            a.me.tokens[b] = chunk;
            if (await_token(a.peer.tokens + b, chunk, a.error, a.spin_limit_cycles)) {
                __threadfence_system();
                if (a.peer.counts[2 * b + parity] != (uint64_t) a.n * 16 + a.element_size) {
                    *a.error = kExchangeMismatch;
                }
            }
        }
        __syncthreads();
        if (*a.error != kExchangeOk) return;
        if (a.element_size == 8) {
            double * dst = static_cast<double *>(a.data) + chunk_begin;
            const volatile double * peer = static_cast<const volatile double *>(a.peer.slots[parity]);
            for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) dst[i] = dst[i] + peer[i];
        } else if (a.wire == WireType::BF16) {
            float * dst = static_cast<float *>(a.data) + chunk_begin;
            const volatile uint16_t * peer = static_cast<const volatile uint16_t *>(a.peer.slots[parity]);
            for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
                dst[i] = from_bf16(to_bf16(dst[i])) + from_bf16(peer[i]);
            }
        } else {
            float * dst = static_cast<float *>(a.data) + chunk_begin;
            const volatile float * peer = static_cast<const volatile float *>(a.peer.slots[parity]);
            for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) dst[i] = dst[i] + peer[i];
        }
    }
}

}  // namespace

cudaError_t load_engine_kernels() {
    const void * kernels[] = {
        reinterpret_cast<const void *>(exchange_kernel),  reinterpret_cast<const void *>(to_bf16_kernel),
        reinterpret_cast<const void *>(add_f32_kernel),   reinterpret_cast<const void *>(add_bf16_kernel),
        reinterpret_cast<const void *>(from_bf16_kernel), reinterpret_cast<const void *>(add_f64_kernel),
    };
    for (const void * kernel : kernels) {
        cudaFuncAttributes attributes;
        const cudaError_t status = cudaFuncGetAttributes(&attributes, kernel);
        if (status != cudaSuccess) return status;
    }
    return cudaSuccess;
}

cudaError_t launch_exchange(const ExchangeArgs & args, cudaStream_t stream) {
    exchange_kernel<<<kExchangeBlocks, kThreads, 0, stream>>>(args);
    return cudaGetLastError();
}

cudaError_t launch_to_wire(const float * src, void * dst, size_t n, WireType wire, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    if (wire == WireType::F32) {
        return cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDefault, stream);
    }
    to_bf16_kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(src, static_cast<uint16_t *>(dst), n);
    return cudaGetLastError();
}

cudaError_t launch_add_wire(float * data, const void * peer, size_t n, WireType wire, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    if (wire == WireType::F32) {
        add_f32_kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(data, static_cast<const float *>(peer), n);
    } else {
        add_bf16_kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(data, static_cast<const uint16_t *>(peer),
                                                                           n);
    }
    return cudaGetLastError();
}

cudaError_t launch_from_wire(const void * src, float * data, size_t n, WireType wire, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    if (wire == WireType::F32) {
        return cudaMemcpyAsync(data, src, n * sizeof(float), cudaMemcpyDefault, stream);
    }
    from_bf16_kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(static_cast<const uint16_t *>(src), data, n);
    return cudaGetLastError();
}

cudaError_t launch_add_exact(double * data, const double * peer, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    add_f64_kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(data, peer, n);
    return cudaGetLastError();
}

}  // namespace llama_tp
