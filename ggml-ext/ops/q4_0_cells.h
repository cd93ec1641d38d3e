#pragma once
// The q4_0 x q8_0 kernel of ggml_ext_exact_matmul. Its arithmetic is fixed,
// so every path (scalar, AVX2, AVX-512, the panels) gives the same bits for
// the same row and token. A block b of 32 values, four bits each, stored as
// n + 8:
//   S = sum over the block of n_k * x_k        (an exact integer)
//   A = fma(d_w(b) * d_x(b), float(S), A)
// At a cell's end A is added to the output's double, the cells in order.
// x is ggml's q8_0 block as it is.

#include "ggml-ext/ops/k_quant_kernel.h"
#include "ggml-ext/ops/q8_0_cells.h"

#include "ggml.h"

#include <cstdint>

namespace ggml_ext {

struct BlockQ4_0 {
    ggml_fp16_t d;
    uint8_t qs[16];  // value k in the low nibble of byte k, value k + 16 in its high one
};

// Rows w[0 .. nr) against tokens x[0 .. nc), nr <= kKQuantTileRows and
// nc <= kKQuantTileTokens, each n_blocks blocks long, cut into cells at the
// block offsets bounds[0] = 0 < ... = n_blocks:
// out[j * ld + i] = the output of row i and token j.
void q40_tile(KQuantKernel kernel, const BlockQ4_0 * const * w, int nr, const BlockQ8_0 * const * x, int nc,
              const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld);

// The same outputs for a batch: up to kPanelRows rows decoded once into a
// panel (values as bytes, 16 rows side by side), then multiplied with any
// number of tokens by AVX-512 VNNI. Where the CPU lacks it,
// kquant_panels_available() is false.

class Q40Panel {
  public:
    explicit Q40Panel(int64_t n_blocks);

    // Rows w[0 .. nr), nr <= kPanelRows, n_blocks blocks each.
    void decode(const BlockQ4_0 * const * w, int nr);
    // Tokens x[0 .. nc) against the panel's rows, cut into cells at bounds:
    // out[j * ld + i] = the output of row i and token j, ld >= kPanelRows
    // (every row of the panel is written).
    void multiply(const BlockQ8_0 * const * x, int nc, const int64_t * bounds, double * out, int64_t ld) const;

  private:
    int64_t n_blocks_, n_padded_;  // blocks, and blocks rounded up to eight (a decoded run)
    AlignedArray<int8_t> values_;  // [block][g][row][4]: values 4g .. 4g+3, as signed bytes
    AlignedArray<int32_t> bias_;   // [block][row]: 128 * the sum of the values
    AlignedArray<float> d_;        // [block][row]
};

}  // namespace ggml_ext
