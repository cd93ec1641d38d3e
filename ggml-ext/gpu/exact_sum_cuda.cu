// ExactSumKernels on a CUDA (or HIP) device.

#include "ggml-ext/ops/exact_sum_kernels.h"

#include "ggml-ext/gpu/cuda_runtime.h"
#include "ggml-ext/gpu/gpu_runtime_api.h"

#include <algorithm>

namespace llama_tp {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxParts = 8;  // per launch; more parts accumulate in further launches

struct Parts {
    const float * p[kMaxParts];
    int n;
};

// Additions in double with no multiply, so nothing fuses: the host loop's bits.
__global__ void sum_kernel(Parts parts, double * out, bool accumulate, size_t n) {
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
        double sum = accumulate ? out[i] : 0.0;
        for (int j = 0; j < parts.n; ++j) sum += (double) parts.p[j][i];
        out[i] = sum;
    }
}

__global__ void round_kernel(const double * in, float * out, size_t n) {
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
        out[i] = __double2float_rn(in[i]);
    }
}

class CudaExactSumKernels final : public ExactSumKernels {
  public:
    // Loads the kernels now (CUDA loads a kernel at its first launch, and a
    // load may wait for the device's running kernels).
    explicit CudaExactSumKernels(int device) : stream_(device) {
        CurrentDevice current(device);
        cudaFuncAttributes attributes;
        check_cuda(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void *>(sum_kernel)),
                   "loading the exact sum kernel", device);
        check_cuda(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void *>(round_kernel)),
                   "loading the exact rounding kernel", device);
    }

    void sum(const float * const * parts, int n_parts, double * out, bool accumulate, size_t n,
             void * stream) override {
        if (n == 0) return;
        CurrentDevice current(stream_.device());
        const cudaStream_t s = stream ? static_cast<cudaStream_t>(stream) : stream_.get();
        for (int done = 0; done < n_parts; done += kMaxParts) {
            Parts batch{};
            batch.n = std::min(n_parts - done, kMaxParts);
            for (int j = 0; j < batch.n; ++j) batch.p[j] = parts[done + j];
            sum_kernel<<<grid_blocks(n, kThreads), kThreads, 0, s>>>(batch, out, accumulate || done > 0, n);
            check_cuda(cudaGetLastError(), "launching an exact sum", stream_.device());
        }
        if (!stream) finish();
    }

    void round(const double * in, float * out, size_t n, void * stream) override {
        if (n == 0) return;
        CurrentDevice current(stream_.device());
        const cudaStream_t s = stream ? static_cast<cudaStream_t>(stream) : stream_.get();
        round_kernel<<<grid_blocks(n, kThreads), kThreads, 0, s>>>(in, out, n);
        check_cuda(cudaGetLastError(), "launching an exact rounding", stream_.device());
        if (!stream) finish();
    }

  private:
    void finish() { check_cuda(cudaStreamSynchronize(stream_.get()), "an exact sum", stream_.device()); }

    CudaStream stream_;
};

}  // namespace

std::unique_ptr<ExactSumKernels> make_cuda_exact_sum_kernels(int device) {
    return std::make_unique<CudaExactSumKernels>(device);
}

}  // namespace llama_tp
