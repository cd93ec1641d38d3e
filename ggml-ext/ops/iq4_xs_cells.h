#pragma once
// The IQ4_XS x q8_K tile kernel of ggml_ext_exact_matmul. Its arithmetic is
// fixed, so every path (scalar, AVX2, AVX-512) gives the same bits for the
// same row and token. A super-block b of 256 values holds eight sub-blocks j
// of 32, each value a four-bit index into ggml's table of sixteen int8
// levels (kvalues_iq4nl, -127 .. 113), each sub-block a six-bit scale
// stored as sc_j + 32:
//   S = sum over the eight sub-blocks j of
//       sc_j * (the products of the sub-block's values and x's)  (an exact integer)
//   A = fma(float(S) * d_w(b), d_x(b), A)   (float(S) rounded to nearest)
// At a cell's end A is added to the output's double, the cells in order.
// One integer a block lets a batch take its rows as panels (iq4xs_panels):
// rows side by side in the lanes, tokens in turn. x is ggml's q8_K block as
// it is; its values lie in -127 .. 127 as ggml quantizes them.

#include "ggml-ext/ops/k_quant_kernel.h"

#include "ggml.h"

#include <cstdint>

namespace ggml_ext {

struct BlockIQ4_XS {
    ggml_fp16_t d;
    uint16_t scales_h;    // two bits a sub-block: the scales' high bits
    uint8_t scales_l[4];  // a nibble a sub-block: their low four bits
    uint8_t qs[128];      // 16 bytes a sub-block: values k in the low nibbles, k + 16 in the high
};

// Rows w[0 .. nr) against tokens x[0 .. nc), nr <= kKQuantTileRows and
// nc <= kKQuantTileTokens, each n_blocks super-blocks long, cut into cells at
// the block offsets bounds[0] = 0 < ... = n_blocks:
// out[j * ld + i] = the output of row i and token j.
void iq4xs_tile(KQuantKernel kernel, const BlockIQ4_XS * const * w, int nr, const GgmlBlockQ8_K * const * x, int nc,
                const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld);

// The same outputs for a batch: up to kPanelRows rows decoded once into
// a panel (levels as bytes, 16 rows side by side, the scales as words of
// each row), then multiplied with any number of tokens by AVX-512 VNNI.
// Where the CPU lacks it, kquant_panels_available() is false.

class IQ4Panel {
  public:
    explicit IQ4Panel(int64_t n_blocks);

    // Rows w[0 .. nr), nr <= kPanelRows, n_blocks super-blocks each.
    void decode(const BlockIQ4_XS * const * w, int nr);
    // Tokens x[0 .. nc) against the panel's rows, cut into cells at bounds:
    // out[j * ld + i] = the output of row i and token j, ld >= kPanelRows
    // (every row of the panel is written).
    void multiply(const GgmlBlockQ8_K * const * x, int nc, const int64_t * bounds, double * out, int64_t ld) const;

    struct Block;  // one super-block of the panel's rows (iq4_xs_cells.cpp)

  private:
    int64_t n_blocks_;
    AlignedArray<Block> blocks_;
};

}  // namespace ggml_ext
