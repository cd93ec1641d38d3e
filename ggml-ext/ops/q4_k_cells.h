#pragma once
// The q4_K (and q5_K) x q8_K tile kernel of ggml_ext_exact_matmul. Its
// arithmetic is fixed, so every path (scalar, AVX2, AVX-512) gives the same
// bits for the same row and token. A super-block b of 256 values (four bits
// each; q5_K's a fifth) holds eight sub-blocks j of 32, each with a 6-bit
// scale sc_j and min m_j:
//   S    = sum over the eight sub-blocks j of
//          sc_j * (the products of the sub-block's values and x's)  (an exact integer)
//   A    = fma(float(S) * d_w(b), d_x(b), A)   (float(S) rounded to nearest)
//   B[l] = fma(dmin_w(b) * m_l, X[l], B[l])    l = 0 .. 7
// where X[l] = d_x(b) * (x's sum over sub-block l), formed once per token.
// At a cell's end A - fold(B) (in float; fold adds the B lanes in halves:
// B[l] + B[l + 4], then c[l] + c[l + 2], then the two left) is added to the
// output's double, the cells in order (ggml-ext/ops/k_cells_totals.h). One
// integer a block lets a batch take its rows as panels (Q4KPanel): rows
// side by side in the lanes, tokens in turn.

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

// The same outputs for a batch: up to kPanelRows q4_K or q5_K rows
// decoded once into a panel (values as bytes, 16 rows side by side, scales
// and mins of each row), then multiplied with any number of tokens by
// AVX-512 VNNI. Where the CPU lacks it, kquant_panels_available() is false.

template <typename Block>
class Q4KPanel {
  public:
    explicit Q4KPanel(int64_t n_blocks);

    // Rows w[0 .. nr), nr <= kPanelRows, n_blocks super-blocks each.
    void decode(const Block * const * w, int nr);
    // Tokens x[0 .. nc) against the panel's rows, cut into cells at bounds:
    // out[j * ld + i] = the output of row i and token j, ld >= kPanelRows
    // (every row of the panel is written).
    void multiply(const BlockQ8_K * const * x, int nc, const int64_t * bounds, double * out, int64_t ld) const;

    struct PanelBlock;  // one super-block of the panel's rows (q4_k_cells.cpp)

  private:
    int64_t n_blocks_;
    AlignedArray<PanelBlock> blocks_;
};

}  // namespace ggml_ext
