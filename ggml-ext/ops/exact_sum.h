#pragma once
// Sums of float partial results that do not depend on how they are grouped.
// A float has a 24-bit significand, a double 53 bits: adding floats (and sums
// of floats) in double is exact as long as the terms lie within about 2^25 of
// each other in magnitude, so any order or grouping of the additions gives
// the same double, and rounding it to float once gives the same float. (When
// terms differ by more, a double rounding error of at most 2^-53 relative can
// move the final float only if the sum lies within that distance of a float
// rounding boundary: about one element in 2^29.)
//
// Tensor parallelism uses this to make its sums independent of the split:
// every partial product of a row-parallel matrix is accumulated in double,
// the rank's double sums are summed across ranks in double, and the total is
// rounded to float once, the same total one device computes from the same
// partial products.
//
// The nodes are custom operations, which only the CPU backend runs in its
// graph; on other backends the segment executor runs them between the graph's
// segments (ggml_ext_exact_node, ExactSumKernels).

#include "ggml.h"

#include <stddef.h>

extern "C" {

// The sum of n_parts >= 1 contiguous F32 tensors of one shape, as F64 of that
// shape. One graph node per up to eight parts (fewer nodes, fewer barriers).
struct ggml_tensor * ggml_ext_exact_sum(struct ggml_context * ctx, struct ggml_tensor ** parts, int n_parts);

// A contiguous F64 tensor rounded to F32 (to nearest), same shape.
struct ggml_tensor * ggml_ext_exact_round(struct ggml_context * ctx, struct ggml_tensor * acc);

enum ggml_ext_exact_op {
    GGML_EXT_EXACT_NONE,        // not one of these nodes
    GGML_EXT_EXACT_SUM,         // dst = parts (src[0..n_parts))
    GGML_EXT_EXACT_ACCUMULATE,  // dst (a view of src[0]) += parts (src[1..n_parts])
    GGML_EXT_EXACT_ROUND,       // dst = src[0] rounded to float
};

// What a node of the functions above does, and for sums the index of its
// first part and how many parts it adds (0 for the rounding).
enum ggml_ext_exact_op ggml_ext_exact_node(const struct ggml_tensor * node, int * first_part, int * n_parts);
}

namespace llama_tp {

// The arithmetic of the nodes, on host memory: out[i] (+)= parts[0][i] +
// parts[1][i] + ... in double, in that order, for i in [begin, end).
void exact_sum_range(const float * const * parts, int n_parts, double * out, bool accumulate, size_t begin, size_t end);
void exact_round_range(const double * in, float * out, size_t begin, size_t end);

}  // namespace llama_tp
