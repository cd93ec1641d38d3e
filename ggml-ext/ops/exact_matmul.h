#pragma once
// x @ W for a row-parallel W whose columns are cut into cells (the reduction
// grid of split-invariant sums): every cell's partial product is computed on
// its own, in float, and the cells are added in double (exact_sum.h), all in
// one pass over W. A rank holding some of the cells and a rank holding the
// rest therefore produce doubles that add up to what one device computes
// over all of them.
//
// Each output's arithmetic depends only on its own row of W and its own
// token, not on how many tokens share the batch or how the threads split the
// work, and it is the same on every SIMD path (ggml-ext/ops/q8_0_cells.h,
// q4_k_cells.h, q6_k_cells.h, iq4_xs_cells.h) and in panels of rows. Types
// without a kernel here are multiplied one cell at a time by ggml's own
// kernels (the caller's choice; see ggml_ext_exact_matmul_takes).

#include "ggml.h"

#include <stdint.h>

extern "C" {

// Whether ggml_ext_exact_matmul multiplies matrices of this type (q8_0, q4_0, q4_K, q5_K, q6_K, IQ4_XS).
bool ggml_ext_exact_matmul_takes(enum ggml_type type);

// The SIMD path of its kernels on this CPU ("avx512", "avx2" or "scalar"),
// the best this build has and the CPU supports, for a type it takes.
const char * ggml_ext_exact_matmul_kernel(enum ggml_type type);

// Whether this CPU's kernel multiplies the type faster than ggml's own
// product, so that matrices which need no exact sums are better multiplied by
// it too (with one cell: NULL bounds), each output then the same in any batch.
bool ggml_ext_exact_matmul_preferred(enum ggml_type type);

// The most cells one product takes (its bounds live in the node's parameters).
#define GGML_EXT_EXACT_MATMUL_MAX_CELLS 14

// w:      [K, M] of a type it takes, in ggml's plain layout (not repacked)
// x:      F32 [K, T], rows contiguous
// bounds: column offsets 0 = b[0] < b[1] < ... = K of the cells (at most
//         14), each a multiple of w's block size; the node keeps a copy.
//         NULL: one cell, the whole row.
// out_type: F64 [M, T], the sums to reduce across ranks (exact_sum.h), or
//           F32 [M, T], each sum rounded once, where no other rank adds to it.
struct ggml_tensor * ggml_ext_exact_matmul(struct ggml_context * ctx, struct ggml_tensor * w, struct ggml_tensor * x,
                                           const int64_t * bounds, enum ggml_type out_type);
}
