#pragma once
// The SIMD paths of the tile kernels of 256-value super-blocks
// (q4_k_cells.h, q6_k_cells.h, iq4_xs_cells.h) and of q4_0's
// (q4_0_cells.h): one choice for all, by what this build has and the CPU
// runs. Every path gives the same bits; they
// differ in speed only.

#include <cstdint>
#include <vector>

namespace ggml_ext {

// ggml's q8_K block: the x of the q6_K and IQ4_XS kernels as it is.
struct GgmlBlockQ8_K {
    float d;
    int8_t qs[256];
    int16_t bsums[16];  // sums of 16 values each
};

enum class KQuantKernel { Scalar, Avx2, Avx512 };

// The paths this build has and this CPU runs, best last.
std::vector<KQuantKernel> kquant_kernels_available();
// The best of them, found once.
KQuantKernel kquant_best_kernel();
const char * kquant_kernel_name(KQuantKernel kernel);

// A tile's most rows and tokens.
constexpr int kKQuantTileRows = 4, kKQuantTileTokens = 8;

// The most tokens a tile of this path should take (any up to kKQuantTileTokens work).
int kquant_tile_tokens(KQuantKernel kernel);

// Whether the path multiplies these types faster than ggml's own products
// on the CPUs it runs on (the AVX-512 one; q4_0's and IQ4_XS's with their
// panels, which need VNNI; measured: docs/benchmarks.md, "One-pass K-quant
// products").
bool kquant_kernel_beats_ggml(KQuantKernel kernel);

}  // namespace ggml_ext
