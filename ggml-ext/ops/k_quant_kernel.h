#pragma once
// The SIMD paths of the tile kernels of 256-value super-blocks
// (q4_k_cells.h, q6_k_cells.h, iq4_xs_cells.h) and of 32-value blocks
// (q8_0_cells.h: q8_0 and q4_0): one choice for all, by what this build has
// and the CPU runs. Every path gives the same bits; they differ in speed
// only.

#include <cstddef>
#include <cstdint>
#include <new>
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

// Whether this build and CPU run the row panels of the q8_0, q4_0, q4_K, q5_K and
// IQ4_XS kernels (AVX-512 VNNI), found once.
bool kquant_panels_available();
// A panel's rows: one a lane of a register of sixteen integers.
constexpr int kPanelRows = 16;

// A panel's storage: n T's, 64-byte aligned (read a register at a time).
template <typename T>
class AlignedArray {
  public:
    explicit AlignedArray(int64_t n)
        : data_(static_cast<T *>(::operator new[](sizeof(T) * (std::size_t) n, std::align_val_t(64)))) {}
    ~AlignedArray() { ::operator delete[](data_, std::align_val_t(64)); }
    AlignedArray(const AlignedArray &) = delete;
    AlignedArray & operator=(const AlignedArray &) = delete;
    T * data() const { return data_; }

  private:
    T * data_;
};

// A tile's most rows and tokens.
constexpr int kKQuantTileRows = 4, kKQuantTileTokens = 8;

// The most tokens a tile of this path should take (any up to kKQuantTileTokens work).
int kquant_tile_tokens(KQuantKernel kernel);

// Whether the path multiplies these types faster than ggml's own products
// on the CPUs it runs on (the AVX-512 one; q8_0's, q4_0's and IQ4_XS's with their
// panels, which need VNNI; measured: docs/benchmarks.md, "One-pass K-quant
// products").
bool kquant_kernel_beats_ggml(KQuantKernel kernel);

}  // namespace ggml_ext
