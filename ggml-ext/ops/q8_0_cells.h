#pragma once
// The kernels of ggml_ext_exact_matmul for the types of 32-value blocks with
// one scale, q8_0 and q4_0, against q8_0 tokens (x is ggml's q8_0 block as
// it is). Their arithmetic is fixed, so every path (scalar, AVX2, AVX-512,
// the panels) gives the same bits for the same row and token. A block b:
//   S = sum over the block of v_k * x_k        (an exact integer)
//   A = fma(d_w(b) * d_x(b), float(S), A)
// At a cell's end A is added to the output's double, the cells in order.
// |S| <= 32 * 128 * 127 < 2^24, so float(S) is exact.

#include "ggml-ext/ops/k_quant_kernel.h"

#include "ggml.h"

#include <cstdint>

namespace ggml_ext {

struct BlockQ8_0 {
    ggml_fp16_t d;
    int8_t qs[32];  // the values
};

struct BlockQ4_0 {
    ggml_fp16_t d;
    uint8_t qs[16];  // value k, plus 8, in the low nibble of byte k; value k + 16, plus 8, in its high one
};

// Rows w[0 .. nr) against tokens x[0 .. nc), nr <= kKQuantTileRows and
// nc <= kKQuantTileTokens, each n_blocks blocks long, cut into cells at the
// block offsets bounds[0] = 0 < ... = n_blocks:
// out[j * ld + i] = the output of row i and token j.
void q80_tile(KQuantKernel kernel, const BlockQ8_0 * const * w, int nr, const BlockQ8_0 * const * x, int nc,
              const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld);
// The same for q4_0 rows.
void q40_tile(KQuantKernel kernel, const BlockQ4_0 * const * w, int nr, const BlockQ8_0 * const * x, int nc,
              const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld);

// The same outputs for a batch: up to kPanelRows rows of q8_0 or q4_0
// decoded once into a panel (values as signed bytes, 16 rows side by side),
// then multiplied with any number of tokens by AVX-512 VNNI. Where the CPU
// lacks it, kquant_panels_available() is false.
template <typename Block>
class Block32Panel {
  public:
    explicit Block32Panel(int64_t n_blocks);

    // Rows w[0 .. nr), nr <= kPanelRows, n_blocks blocks each.
    void decode(const Block * const * w, int nr);
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

// The same outputs for a few tokens (up to kLaneTokens): the tokens laid
// out once, eight side by side in the lanes of a register (four bytes of
// each, two blocks a register), then each row's values against them by
// AVX-512 VNNI, no sums across lanes. Where the CPU lacks it,
// kquant_panels_available() is false.
constexpr int kLaneTokens = 32;

template <typename Block>
class Block32TokenLanes {
  public:
    // Tokens x[0 .. nc), nc <= kLaneTokens, n_blocks blocks each.
    Block32TokenLanes(const BlockQ8_0 * const * x, int nc, int64_t n_blocks);

    // Rows w[0 .. nr), nr <= kKQuantTileRows, against the tokens, cut into
    // cells at bounds: out[j * ld + i] = the output of row i and token j.
    void multiply(const Block * const * w, int nr, const int64_t * bounds, double * out, int64_t ld) const;

  private:
    int nc_;
    int64_t n_blocks_, stride_;     // stride_: one g of a group of eight tokens
    AlignedArray<int32_t> values_;  // [group][g][block][8]: values 4g .. 4g+3 (one block more, zeros)
    AlignedArray<int32_t> start_;   // [group][block][8]: -(the rows' bias) * the sum of the values
    AlignedArray<float> d_;         // [group][block][8]
};

}  // namespace ggml_ext
