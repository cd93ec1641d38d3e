#pragma once
// The q8_0 x q8_0 tile kernel of ggml_ext_exact_matmul. Its arithmetic is
// fixed, so every path (scalar, AVX2, VNNI, AVX-512) gives the same bits for the same
// row and token:
//   for every block b of a cell and every lane l (bytes 4l .. 4l+3):
//     acc[l] = fma(d_w(b) * d_x(b), sum of the lane's four byte products, acc[l])
//   at the cell's end acc[l] is added to a double of its lane; the output is
//   the sum of the eight doubles, lane 0 first.
// The integer sums are exact and the floats are added in double (exact_sum.h),
// so a split of the cells between ranks adds up to the same doubles.

#include "ggml.h"

#include <cstdint>
#include <vector>

namespace ggml_ext {

struct BlockQ8_0 {
    ggml_fp16_t d;
    int8_t qs[32];
};

enum class Q8Kernel { Scalar, Avx2, Vnni, Avx512 };

// The kernels this build has and this CPU runs, best last.
std::vector<Q8Kernel> q8_kernels_available();
// The best of them, found once (it is read on every product).
Q8Kernel q8_best_kernel();
const char * q8_kernel_name(Q8Kernel kernel);

constexpr int kQ8TileRows = 4, kQ8TileTokens = 8;

// The most tokens a tile of this kernel should take (any up to kQ8TileTokens work).
int q8_tile_tokens(Q8Kernel kernel);

// Whether the kernel multiplies q8_0 matrices faster than ggml's own q8_0
// product on the CPUs it runs on (measured: docs/benchmarks.md).
bool q8_kernel_beats_ggml(Q8Kernel kernel);

// Rows w[0 .. nr) against tokens x[0 .. nc), nr <= kQ8TileRows and
// nc <= kQ8TileTokens, each row and token n_blocks blocks long, cut into cells
// at the block offsets bounds[0] = 0 < ... = n_blocks:
// out[j * ld + i] = the output of row i and token j.
void q8_tile(Q8Kernel kernel, const BlockQ8_0 * const * w, int nr, const BlockQ8_0 * const * x, int nc,
             const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld);

// A tile's tokens laid out once for all the tiles of rows that read them,
// where the kernel has a layout of its own (the AVX-512 kernel's pairs of
// tokens: their bytes biased and scales converted), so that a product of a
// few tokens does not form it again for every four rows.
class Q8Tokens {
  public:
    Q8Tokens(Q8Kernel kernel, const BlockQ8_0 * const * x, int nc, int64_t n_blocks);

  private:
    friend void q8_tile(Q8Kernel kernel, const BlockQ8_0 * const * w, int nr, const Q8Tokens & x,
                        const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld);
    const BlockQ8_0 * x_[kQ8TileTokens];
    int nc_;
    std::vector<uint8_t> laid_out_;  // empty: the kernel reads x_ as it is
};

// q8_tile on tokens laid out once (the same bits).
void q8_tile(Q8Kernel kernel, const BlockQ8_0 * const * w, int nr, const Q8Tokens & x, const int64_t * bounds,
             int64_t n_blocks, double * out, int64_t ld);

}  // namespace ggml_ext
