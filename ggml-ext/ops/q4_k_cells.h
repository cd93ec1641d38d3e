#pragma once
// The q4_K (and q5_K) x q8_K tile kernel of ggml_ext_exact_matmul. Its
// arithmetic is fixed, so every path (scalar, AVX2, AVX-512) gives the same
// bits for the same row and token. A super-block b of 256 values (four bits
// each; q5_K's a fifth) holds eight sub-blocks j of 32, each with a 6-bit
// scale sc_j and min m_j; the sub-blocks are
// taken in pairs (0, 2), (1, 3), (4, 6), (5, 7), the first of each pair in
// lanes 0-7 and the second in lanes 8-15:
//   S[t] = sum over the four sub-blocks j of t's half of
//          sc_j * (the products of the sub-block's values 4u .. 4u+3),
//          u = t mod 8                                  (an exact integer)
//   A[t] = fma(S[t] * d_w(b), d_x(b), A[t])             t = 0 .. 15
//   B[l] = fma(dmin_w(b) * m_l, X[l], B[l])             l = 0 .. 7
// where X[l] = d_x(b) * (x's sum over sub-block l), formed once per token.
// At a cell's end F[t] = (A[t] + A[t + 8]) - B[t] (t < 8, in float) is
// added to a double of its lane; the output is the eight doubles added in
// halves: d[t] + d[t + 4], then c[t] + c[t + 2], then the two left
// (ggml-ext/ops/k_cells_totals.h).
// S stays below 2^24, so it is a float exactly.

#include "ggml-ext/ops/k_quant_kernel.h"

#include "ggml.h"

#include <cstdint>

namespace ggml_ext {

struct BlockQ4_K {
    ggml_fp16_t d, dmin;
    uint8_t scales[12];  // eight 6-bit scales and eight 6-bit mins
    uint8_t qs[128];     // 64 values a 32 bytes: low nibbles, then high
};

struct BlockQ5_K {
    ggml_fp16_t d, dmin;
    uint8_t scales[12];  // as q4_K's
    uint8_t qh[32];      // byte k: bit j the fifth bit of sub-block j's value k
    uint8_t qs[128];     // the low four bits, as q4_K's
};

// ggml's q8_K block as this kernel reads it: the values in the order of
// the pairs above (sub-blocks 0, 2, 1, 3, 4, 6, 5, 7), and in place of
// ggml's sums of 16 values, X (q4k_lay_out forms it from ggml's block).
struct BlockQ8_K {
    float d;
    int8_t qs[256];
    float sums[8];  // X[l] = d * (the sum of sub-block l's values)
};

// Turns n ggml q8_K blocks, in place, into BlockQ8_K's form.
void q4k_lay_out(void * x, int64_t n);

// Rows w[0 .. nr) against tokens x[0 .. nc), nr <= kKQuantTileRows and
// nc <= kKQuantTileTokens, each n_blocks super-blocks long, cut into cells at
// the block offsets bounds[0] = 0 < ... = n_blocks:
// out[j * ld + i] = the output of row i and token j.
void q4k_tile(KQuantKernel kernel, const BlockQ4_K * const * w, int nr, const BlockQ8_K * const * x, int nc,
              const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld);
// The same for q5_K rows (x laid out by q4k_lay_out as well).
void q5k_tile(KQuantKernel kernel, const BlockQ5_K * const * w, int nr, const BlockQ8_K * const * x, int nc,
              const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld);

}  // namespace ggml_ext
