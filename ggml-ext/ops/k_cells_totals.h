#pragma once
// What the tile kernels on the K-quant paths (q4_k_cells.h, q6_k_cells.h,
// iq4_xs_cells.h, q8_0_cells.h) share: the doubles each output's lanes are
// added to, the order its value is formed from them, the loop over a
// tile's cells, a tile run as smaller cores, the table of every tile shape,
// and the sums and transposes of their panels. Included by their sources
// only, which are compiled for the CPU's vector instructions.

#include "ggml-ext/ops/k_quant_kernel.h"

#include <cmath>
#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define LLAMA_TP_KCELLS_AVX2 1
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define LLAMA_TP_KCELLS_AVX512 1
#if defined(__AVX512VNNI__)
#define LLAMA_TP_KCELLS_PANELS 1  // kquant_panels_available()
#endif
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

// One double an output (q8_0, q4_0, IQ4_XS, q4_K and q5_K): each cell's float added in order.
struct OutputTotal {
    double d = 0.0;
    double total() const { return d; }
};

// The one float over a cell of q8_0, q4_0 and IQ4_XS.
struct CellLane {
    using Totals = OutputTotal;
    float a = 0.0f;
    void add_to(OutputTotal & t) const { t.d += (double) a; }
};

// q4_K's and q5_K's: A and eight B lanes; at a cell's end A - fold(B) is
// added to the double, fold(B) the B lanes added in halves: c[l] = B[l] +
// B[l + 4], then c[l] + c[l + 2], then the two left.
inline float fold(const float * B) {
    float c[4];
    for (int l = 0; l < 4; ++l) c[l] = B[l] + B[l + 4];
    for (int l = 0; l < 2; ++l) c[l] += c[l + 2];
    return c[0] + c[1];
}

struct CellLanesAB {
    using Totals = OutputTotal;
    float a = 0.0f, b[kMLanes] = {};
    void add_to(OutputTotal & t) const { t.d += (double) (a - fold(b)); }
};

// A block's exact integer S into A: A = fma(float(S) * d_w, d_x, A).
inline void add_block(float & a, int32_t S, float dw, float dx) {
    a = std::fma((float) S * dw, dx, a);
}

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

// Runs a tile of nr rows and nc tokens on the path asked for:
// Paths::scalar<RM, RN>, Paths::avx2<RM, RN> and Paths::avx512<RM, RN> are
// the tiles of each shape (the SIMD ones in builds with those paths).
template <typename Paths, typename BlockW, typename BlockX>
void run_tile(KQuantKernel kernel, const BlockW * const * w, int nr, const BlockX * const * x, int nc,
              const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld) {
    using Fn = void (*)(const BlockW * const *, const BlockX * const *, const int64_t *, int64_t, double *, int64_t);
    using Table = Fn[kKQuantTileRows][kKQuantTileTokens];
    static const Table kScalar = LLAMA_TP_KCELLS_TILES(Paths::template scalar);
    const Table * table = &kScalar;
#if defined(LLAMA_TP_KCELLS_AVX2)
    static const Table kAvx2 = LLAMA_TP_KCELLS_TILES(Paths::template avx2);
    if (kernel == KQuantKernel::Avx2) table = &kAvx2;
#endif
#if defined(LLAMA_TP_KCELLS_AVX512)
    static const Table kAvx512 = LLAMA_TP_KCELLS_TILES(Paths::template avx512);
    if (kernel == KQuantKernel::Avx512) table = &kAvx512;
#endif
    (void) kernel;  // builds without SIMD paths have the scalar one only
    (*table)[nr - 1][nc - 1](w, x, bounds, n_blocks, out, ld);
}

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

// fold(B) of a register of eight B lanes.
inline float fold(__m256 B) {
    const __m128 c = _mm_add_ps(_mm256_castps256_ps128(B), _mm256_extractf128_ps(B, 1));
    const __m128 c2 = _mm_add_ps(c, _mm_movehl_ps(c, c));
    return _mm_cvtss_f32(_mm_add_ss(c2, _mm_shuffle_ps(c2, c2, 1)));
}

// CellLanesAB with B in a register.
struct CellLanesAB256 {
    using Totals = OutputTotal;
    float a = 0.0f;
    __m256 b = _mm256_setzero_ps();
    void add_to(OutputTotal & t) const { t.d += (double) (a - fold(b)); }
};

// The sum of a register's eight integers (in any order: they are exact).
inline int32_t sum_of(__m256i s) {
    const __m128i four = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    const __m128i two = _mm_add_epi32(four, _mm_unpackhi_epi64(four, four));
    return _mm_cvtsi128_si32(_mm_add_epi32(two, _mm_shuffle_epi32(two, 1)));
}

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

// Lane n of lo and of hi: the sums of s[n]'s low and high eight integers.
inline void sum_halves(const __m512i (&s)[8], __m256i & lo, __m256i & hi) {
    // Per 128-bit lane: x[i] = (s[2i], s[2i + 1]) twice, y[h] = s[4h .. 4h + 3].
    __m512i x[4], y[2];
    for (int i = 0; i < 4; ++i) {
        x[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2 * i], s[2 * i + 1]),
                                _mm512_unpackhi_epi32(s[2 * i], s[2 * i + 1]));
    }
    for (int h = 0; h < 2; ++h) {
        y[h] = _mm512_add_epi32(_mm512_unpacklo_epi64(x[2 * h], x[2 * h + 1]),
                                _mm512_unpackhi_epi64(x[2 * h], x[2 * h + 1]));
    }
    // Lanes (0, 1) of each y added (the low halves) and (2, 3) (the high).
    const __m512i z = _mm512_add_epi32(_mm512_shuffle_i32x4(y[0], y[1], 0x88), _mm512_shuffle_i32x4(y[0], y[1], 0xdd));
    const __m512i halves = _mm512_shuffle_i32x4(z, z, 0xd8);
    lo = _mm512_castsi512_si256(halves);
    hi = _mm512_extracti64x4_epi64(halves, 1);
}

// Lane n of the result: the sum of s[n]'s sixteen integers.
inline __m256i sum_each(const __m512i (&s)[8]) {
    __m256i lo, hi;
    sum_halves(s, lo, hi);
    return _mm256_add_epi32(lo, hi);
}

// Dwords 16k .. 16k + 15 of the sixteen rows as sixteen registers of a
// dword each row: four bytes of every row side by side, stored at dst.
inline void transpose_16(const int8_t (*rows)[256], int k, void * to) {
    char * dst = static_cast<char *>(to);
    __m512i r[16], t[16], u[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(rows[i] + 64 * k);
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    // u[4i + m]'s 128-bit lane L: dword 4L + m of rows 4i .. 4i + 3.
    for (int i = 0; i < 4; ++i) {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    // Lane L of u[m], u[4 + m], u[8 + m], u[12 + m] side by side: dword 4L + m.
    for (int m = 0; m < 4; ++m) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x44), v1 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xee);
        const __m512i v2 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x44);
        const __m512i v3 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xee);
        _mm512_store_si512(dst + 64 * m, _mm512_shuffle_i32x4(v0, v2, 0x88));
        _mm512_store_si512(dst + 64 * (4 + m), _mm512_shuffle_i32x4(v0, v2, 0xdd));
        _mm512_store_si512(dst + 64 * (8 + m), _mm512_shuffle_i32x4(v1, v3, 0x88));
        _mm512_store_si512(dst + 64 * (12 + m), _mm512_shuffle_i32x4(v1, v3, 0xdd));
    }
}

// A panel's outputs for one token: the sixteen rows' doubles, each cell's
// float added in order.
struct PanelTotals {
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();

    void add(__m512 cell) {
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(cell)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(cell), 1))));
    }
    void store(double * out) const {
        _mm512_storeu_pd(out, lo);
        _mm512_storeu_pd(out + 8, hi);
    }
};

// The scale of each word of a block's four registers of values, the one
// sub_block(register, word) names: vpermw spreads the block's scales, as
// words, over a register.
template <int (*sub_block)(int, int)>
struct WordScales {
    alignas(64) int16_t index[4][32];

    WordScales() {
        for (int k = 0; k < 4; ++k) {
            for (int w = 0; w < 32; ++w) index[k][w] = (int16_t) sub_block(k, w);
        }
    }
    __m512i spread(int k, __m512i scales) const {
        return _mm512_permutexvar_epi16(_mm512_load_si512(index[k]), scales);
    }
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
