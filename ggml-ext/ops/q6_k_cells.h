#pragma once
// The q6_K x q8_K tile kernel of ggml_ext_exact_matmul. Its arithmetic is
// fixed, so every path (scalar, AVX2, AVX-512) gives the same bits for the
// same row and token. A super-block b of 256 six-bit values v (stored
// biased: the value is v - 32) holds sixteen sub-blocks of 16 with int8
// scales sc_j. Each half of 128 values is four runs g of 32 (g = 0 .. 3,
// values 32g .. 32g+31 of the half); the runs with g even add to lanes
// 0-7, the odd ones to lanes 8-15:
//   S[t] = sum over the four runs of t's lanes of
//          sc_j * (the products of the run's values 4u .. 4u+3 and x's),
//          u = t mod 8, j the sub-block of those values   (an exact integer)
//   O[l] = 32 * (sc_2l * x's sum over sub-block 2l
//                + sc_2l+1 * x's sum over sub-block 2l+1) (an exact integer)
//   A[t] = fma(S[t] * d_w(b), d_x(b), A[t])             t = 0 .. 15
//   B[l] = fma(O[l] * d_w(b), d_x(b), B[l])             l = 0 .. 7
// At a cell's end F[t] = (A[t] + A[t + 8]) - B[t] (t < 8, in float) is
// added to a double of its lane; the output is the eight doubles added in
// halves: d[t] + d[t + 4], then c[t] + c[t + 2], then the two left
// (ggml-ext/ops/k_cells_totals.h). S and O stay below 2^24, so they are floats exactly.
// x is ggml's q8_K block as it is.

#include "ggml-ext/ops/k_quant_kernel.h"

#include "ggml.h"

#include <cstdint>

namespace ggml_ext {

struct BlockQ6_K {
    uint8_t ql[128];    // the values' low four bits
    uint8_t qh[64];     // their high two bits
    int8_t scales[16];  // one per sub-block of 16
    ggml_fp16_t d;
};

// Rows w[0 .. nr) against tokens x[0 .. nc), nr <= kKQuantTileRows and
// nc <= kKQuantTileTokens, each n_blocks super-blocks long, cut into cells at
// the block offsets bounds[0] = 0 < ... = n_blocks:
// out[j * ld + i] = the output of row i and token j.
void q6k_tile(KQuantKernel kernel, const BlockQ6_K * const * w, int nr, const GgmlBlockQ8_K * const * x, int nc,
              const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld);

}  // namespace ggml_ext
