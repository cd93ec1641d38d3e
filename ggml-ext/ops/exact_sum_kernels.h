#pragma once
// The arithmetic of split-invariant sums' nodes (exact_sum.h) on the memory of
// a backend that cannot run them in its graph: what the segment executor runs
// between the graph's segments there. stream: a stream of the device (a
// cudaStream_t) to queue the work on and return at once; nullptr: the
// kernels' own, and the call returns when the values are written.

#include <cstddef>
#include <memory>

namespace llama_tp {

class ExactSumKernels {
  public:
    virtual ~ExactSumKernels() = default;
    // out[i] (+)= parts[0][i] + ... + parts[n_parts - 1][i] in double, in that
    // order, for i < n: exact_sum_range's bits.
    virtual void sum(const float * const * parts, int n_parts, double * out, bool accumulate, size_t n,
                     void * stream) = 0;
    // out[i] = in[i] rounded to float (to nearest): exact_round_range's bits.
    virtual void round(const double * in, float * out, size_t n, void * stream) = 0;
};

// On a CUDA device's memory, on a stream of their own (GPU builds only).
// Throws llama_tp::Error where the device cannot be used.
std::unique_ptr<ExactSumKernels> make_cuda_exact_sum_kernels(int device);

}  // namespace llama_tp
