#pragma once
// What the K-quant tile kernels (q4_k_cells.h, q6_k_cells.h) share: the
// doubles each output's lanes are added to, the order its value is formed
// from them, the loop over a tile's cells, a tile run as smaller cores, and
// the table of every tile shape. Included by their sources only, which are compiled for the CPU's
// vector instructions.

#include "ggml-ext/ops/k_quant_kernel.h"

#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define LLAMA_TP_KCELLS_AVX2 1
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define LLAMA_TP_KCELLS_AVX512 1
#endif
#endif

// GCC 12's AVX-512 intrinsics pass an undefined register as the unused
// merge source and then warn about it where they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace ggml_ext::kcells {

constexpr int kSLanes = 16, kMLanes = 8;  // an output's A lanes and B lanes

// One output's eight doubles: at a cell's end, F[t] = (A[t] + A[t + 8]) -
// B[t] in float is added to d[t]; the output is then d[t] + d[t + 4],
// then c[t] + c[t + 2], then the two left.
struct OutputTotals {
    double d[8] = {};

    void add(const float * A, const float * B) {
        for (int t = 0; t < 8; ++t) d[t] += (double) ((A[t] + A[t + 8]) - B[t]);
    }
    double total() const {
        double c[8];
        for (int t = 0; t < 8; ++t) c[t] = d[t];
        for (int n = 4; n >= 1; n /= 2) {
            for (int t = 0; t < n; ++t) c[t] += c[t + n];
        }
        return c[0];
    }
};

// An output's lanes over one cell, on the scalar path.
struct CellLanes {
    using Totals = OutputTotals;
    float a[kSLanes] = {}, b[kMLanes] = {};
    void add_to(OutputTotals & t) const { t.add(a, b); }
};

// A tile's cells: each starts its outputs' lanes (Lanes[RM][RN]) at zero,
// runs block(b, lanes) for each of its blocks and adds the lanes to the
// outputs' totals; then out[j * ld + i] = the total of row i and token j.
template <int RM, int RN, typename Lanes, typename BlockFn>
void run_cells(const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld, const BlockFn & block) {
    typename Lanes::Totals total[RM][RN];
    for (int64_t b = 0, c = 1; b < n_blocks; ++c) {
        Lanes lanes[RM][RN];
        for (; b < bounds[c]; ++b) block(b, lanes);
        for (int i = 0; i < RM; ++i)
            for (int j = 0; j < RN; ++j) lanes[i][j].add_to(total[i][j]);
    }
    for (int i = 0; i < RM; ++i)
        for (int j = 0; j < RN; ++j) out[j * ld + i] = total[i][j].total();
}

// A tile as cores of at most `most` rows x tokens, the rows in two parts;
// Core<R, N>::run(w, x, bounds, n_blocks, out, ld) runs one.
template <int RM, int RN, int most, template <int, int> class Core, typename BlockW, typename BlockX>
void in_cores(const BlockW * const * w, const BlockX * const * x, const int64_t * bounds, int64_t n_blocks,
              double * out, int64_t ld) {
    if constexpr (RM * RN <= most || RM == 1) {
        Core<RM, RN>::run(w, x, bounds, n_blocks, out, ld);
    } else {
        in_cores<RM / 2, RN, most, Core>(w, x, bounds, n_blocks, out, ld);
        in_cores<RM - RM / 2, RN, most, Core>(w + RM / 2, x, bounds, n_blocks, out + RM / 2, ld);
    }
}

// Every tile shape of one path, [rows - 1][tokens - 1]: fn<RM, RN>.
#define LLAMA_TP_KCELLS_TILE_ROW(fn, RM) \
    { fn<RM, 1>, fn<RM, 2>, fn<RM, 3>, fn<RM, 4>, fn<RM, 5>, fn<RM, 6>, fn<RM, 7>, fn<RM, 8> }
#define LLAMA_TP_KCELLS_TILES(fn)                                                                          \
    {                                                                                                      \
        LLAMA_TP_KCELLS_TILE_ROW(fn, 1), LLAMA_TP_KCELLS_TILE_ROW(fn, 2), LLAMA_TP_KCELLS_TILE_ROW(fn, 3), \
            LLAMA_TP_KCELLS_TILE_ROW(fn, 4)                                                                \
    }
static_assert(kKQuantTileRows == 4 && kKQuantTileTokens == 8, "LLAMA_TP_KCELLS_TILES lists shapes up to 4 x 8");

#if defined(LLAMA_TP_KCELLS_AVX2)
inline __m256i load256(const void * p) {
    return _mm256_loadu_si256(static_cast<const __m256i *>(p));
}

// OutputTotals in registers of four doubles: the same additions.
struct Totals256 {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();  // d[0..3], d[4..7]

    void add(__m256 a_lo, __m256 a_hi, __m256 b) {
        const __m256 f = _mm256_sub_ps(_mm256_add_ps(a_lo, a_hi), b);
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
    }
    double total() const {
        const __m256d c4 = _mm256_add_pd(lo, hi);
        const __m128d c2 = _mm_add_pd(_mm256_castpd256_pd128(c4), _mm256_extractf128_pd(c4, 1));
        return _mm_cvtsd_f64(_mm_add_sd(c2, _mm_unpackhi_pd(c2, c2)));
    }
};

// An output's lanes over one cell, on the 256-bit path: A in two registers.
struct CellLanes256 {
    using Totals = Totals256;
    __m256 a_lo = _mm256_setzero_ps(), a_hi = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    void add_to(Totals256 & t) const { t.add(a_lo, a_hi, b); }
};
#endif

// A 256-bit path's tile: past four tokens, tiles of four tokens (the path
// asks for four at most); each as cores of up to four outputs.
template <template <int, int> class Core, int RM, int RN, typename BlockW, typename BlockX>
void tile_256(const BlockW * const * w, const BlockX * const * x, const int64_t * bounds, int64_t n_blocks,
              double * out, int64_t ld) {
    if constexpr (RN > 4) {
        tile_256<Core, RM, 4>(w, x, bounds, n_blocks, out, ld);
        tile_256<Core, RM, RN - 4>(w, x + 4, bounds, n_blocks, out + 4 * ld, ld);
    } else {
        in_cores<RM, RN, 4, Core>(w, x, bounds, n_blocks, out, ld);
    }
}

#if defined(LLAMA_TP_KCELLS_AVX512)
// OutputTotals in a register of eight doubles: the same additions.
struct Totals512 {
    __m512d d = _mm512_setzero_pd();

    void add(__m512 a, __m256 b) {
        const __m256 a_hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
        d = _mm512_add_pd(d, _mm512_cvtps_pd(_mm256_sub_ps(_mm256_add_ps(_mm512_castps512_ps256(a), a_hi), b)));
    }
    double total() const {
        const __m512d c = d;
        const __m256d c4 = _mm256_add_pd(_mm512_castpd512_pd256(c), _mm512_extractf64x4_pd(c, 1));
        const __m128d c2 = _mm_add_pd(_mm256_castpd256_pd128(c4), _mm256_extractf128_pd(c4, 1));
        return _mm_cvtsd_f64(_mm_add_sd(c2, _mm_unpackhi_pd(c2, c2)));
    }
};

// An output's lanes over one cell, on the 512-bit path: A in one register,
// B in half of one.
struct CellLanes512 {
    using Totals = Totals512;
    __m512 a = _mm512_setzero_ps();
    __m256 b = _mm256_setzero_ps();
    void add_to(Totals512 & t) const { t.add(a, b); }
};

// acc + the word pairs' products, summed in pairs.
inline __m512i add_pair_products(__m512i acc, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
    return _mm512_dpwssd_epi32(acc, a, b);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}
#endif

}  // namespace ggml_ext::kcells
