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

#include "ggml.h"

extern "C" {

// The sum of n_parts >= 1 contiguous F32 tensors of one shape, as F64 of that
// shape. One graph node per up to nine parts (fewer nodes, fewer barriers).
struct ggml_tensor * ggml_ext_exact_sum(struct ggml_context * ctx, struct ggml_tensor ** parts, int n_parts);

// A contiguous F64 tensor rounded to F32 (to nearest), same shape.
struct ggml_tensor * ggml_ext_exact_round(struct ggml_context * ctx, struct ggml_tensor * acc);
}
