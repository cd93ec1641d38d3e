#include "ggml-ext/ops/q6_k_cells.h"

#include "ggml-ext/ops/k_cells_totals.h"

#include <cmath>

#include "ggml-cpu.h"

namespace ggml_ext {

static_assert(sizeof(BlockQ6_K) == 210, "the layout of ggml's block_q6_K");
static_assert(sizeof(GgmlBlockQ8_K) == 292, "the layout of ggml's block_q8_K");

namespace {

using namespace kcells;

// The six-bit value of byte k of run g in half h (q6_k_cells.h).
int value_of(const BlockQ6_K & wb, int h, int g, int k) {
    const int ql = wb.ql[64 * h + 32 * (g & 1) + k];
    const int qh = wb.qh[32 * h + k];
    return (g < 2 ? ql & 15 : ql >> 4) | (((qh >> (2 * g)) & 3) << 4);
}

template <int RM, int RN>
void tile_scalar(const BlockQ6_K * const * w, const GgmlBlockQ8_K * const * x, const int64_t * bounds, int64_t n_blocks,
                 double * out, int64_t ld) {
    run_cells<RM, RN, CellLanes>(bounds, n_blocks, out, ld, [&](int64_t b, CellLanes(&lanes)[RM][RN]) {
        for (int i = 0; i < RM; ++i) {
            const BlockQ6_K & wb = w[i][b];
            const float dw = ggml_fp16_to_fp32(wb.d);
            for (int j = 0; j < RN; ++j) {
                const GgmlBlockQ8_K & xb = x[j][b];
                int32_t S[kSLanes] = {}, O[kMLanes];
                for (int h = 0; h < 2; ++h) {
                    for (int g = 0; g < 4; ++g) {
                        const int8_t * xq = xb.qs + 128 * h + 32 * g;
                        for (int u = 0; u < 8; ++u) {
                            int32_t p = 0;
                            for (int k = 4 * u; k < 4 * u + 4; ++k) p += value_of(wb, h, g, k) * xq[k];
                            S[8 * (g % 2) + u] += wb.scales[8 * h + 2 * g + u / 4] * p;
                        }
                    }
                }
                for (int m = 0; m < kMLanes; ++m) {
                    O[m] = 32 * (wb.scales[2 * m] * xb.bsums[2 * m] + wb.scales[2 * m + 1] * xb.bsums[2 * m + 1]);
                }
                CellLanes & l = lanes[i][j];
                for (int t = 0; t < kSLanes; ++t) l.a[t] = std::fma((float) S[t] * dw, xb.d, l.a[t]);
                for (int m = 0; m < kMLanes; ++m) l.b[m] = std::fma((float) O[m] * dw, xb.d, l.b[m]);
            }
        }
    });
}

#if defined(LLAMA_TP_KCELLS_AVX2)
// The block's sixteen scales as words.
__m256i scale_words(const BlockQ6_K & wb) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(wb.scales)));
}

// O (q6_k_cells.h) for one token: its sums of 16 times the scales, in
// pairs, times 32.
__m256i offsets(__m256i scales, const GgmlBlockQ8_K & xb) {
    return _mm256_slli_epi32(_mm256_madd_epi16(load256(xb.bsums), scales), 5);
}

// Up to four rows and tokens in all (three accumulators each, of 16 registers).
template <int RM, int RN>
struct Avx2Core {
    static void run(const BlockQ6_K * const * w, const GgmlBlockQ8_K * const * x, const int64_t * bounds,
                    int64_t n_blocks, double * out, int64_t ld) {
        const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
        run_cells<RM, RN, CellLanes256>(bounds, n_blocks, out, ld, [&](int64_t b, CellLanes256(&lanes)[RM][RN]) {
            for (int i = 0; i < RM; ++i) {
                const BlockQ6_K & wb = w[i][b];
                const __m256 dw = _mm256_set1_ps(_cvtsh_ss(wb.d));
                __m256i s[2][RN];
                for (int j = 0; j < RN; ++j) s[0][j] = s[1][j] = _mm256_setzero_si256();
                for (int h = 0; h < 2; ++h) {
                    const __m256i ql0 = load256(wb.ql + 64 * h), ql1 = load256(wb.ql + 64 * h + 32);
                    const __m256i qh = load256(wb.qh + 32 * h);
                    const __m256i v[4] = {
                        _mm256_or_si256(_mm256_and_si256(ql0, low4),
                                        _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
                        _mm256_or_si256(_mm256_and_si256(ql1, low4),
                                        _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                                        _mm256_and_si256(qh, bits45)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45)),
                    };
                    for (int g = 0; g < 4; ++g) {
                        const int j0 = 8 * h + 2 * g;  // the run's two sub-blocks
                        const __m256i sc =
                            _mm256_set_m128i(_mm_set1_epi16(wb.scales[j0 + 1]), _mm_set1_epi16(wb.scales[j0]));
                        for (int j = 0; j < RN; ++j) {
                            const __m256i p = _mm256_maddubs_epi16(v[g], load256(x[j][b].qs + 128 * h + 32 * g));
                            s[g % 2][j] = _mm256_add_epi32(s[g % 2][j], _mm256_madd_epi16(p, sc));
                        }
                    }
                }
                const __m256i scales = scale_words(wb);
                for (int j = 0; j < RN; ++j) {
                    const __m256 dx = _mm256_set1_ps(x[j][b].d);
                    CellLanes256 & l = lanes[i][j];
                    l.a_lo = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s[0][j]), dw), dx, l.a_lo);
                    l.a_hi = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s[1][j]), dw), dx, l.a_hi);
                    const __m256 o = _mm256_cvtepi32_ps(offsets(scales, x[j][b]));
                    l.b = _mm256_fmadd_ps(_mm256_mul_ps(o, dw), dx, l.b);
                }
            }
        });
    }
};

template <int RM, int RN>
void tile_avx2(const BlockQ6_K * const * w, const GgmlBlockQ8_K * const * x, const int64_t * bounds, int64_t n_blocks,
               double * out, int64_t ld) {
    tile_256<Avx2Core, RM, RN>(w, x, bounds, n_blocks, out, ld);
}
#endif

#if defined(LLAMA_TP_KCELLS_AVX512)
// The sub-block of each word of the block's four registers of values: half
// h, runs (0, 1) or (2, 3), eight words a sub-block.
constexpr int scale_of_word(int reg, int w) {
    return 4 * reg + w / 8;
}

// Up to eight rows x tokens: each output's 16 A lanes in one register, its
// eight B lanes in a half one.
template <int RM, int RN>
struct Avx512Core {
    static void run(const BlockQ6_K * const * w, const GgmlBlockQ8_K * const * x, const int64_t * bounds,
                    int64_t n_blocks, double * out, int64_t ld) {
        static const WordScales<scale_of_word> kWordScales;
        const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
        // Where each register's high bits sit in qh: runs 0 and 1 (left by 4
        // and 2), runs 2 and 3 (right by 0 and 2), sixteen words each.
        const __m512i left = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
        const __m512i right = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
        run_cells<RM, RN, CellLanes512>(bounds, n_blocks, out, ld, [&](int64_t b, CellLanes512(&lanes)[RM][RN]) {
            for (int i = 0; i < RM; ++i) {
                const BlockQ6_K & wb = w[i][b];
                const float dw = _cvtsh_ss(wb.d);
                __m512i vals[4];
                for (int h = 0; h < 2; ++h) {
                    const __m512i ql = _mm512_loadu_si512(wb.ql + 64 * h);
                    const __m512i qh = _mm512_broadcast_i64x4(load256(wb.qh + 32 * h));
                    vals[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4),
                                                  _mm512_and_si512(_mm512_sllv_epi16(qh, left), bits45));
                    vals[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                                      _mm512_and_si512(_mm512_srlv_epi16(qh, right), bits45));
                }
                const __m256i scales = scale_words(wb);
                const __m512i sc = _mm512_castsi256_si512(scales);
                __m512i sc_words[4];
                for (int k = 0; k < 4; ++k) sc_words[k] = kWordScales.spread(k, sc);
                const __m512 dw16 = _mm512_set1_ps(dw);
                const __m256 dw8 = _mm256_set1_ps(dw);
                for (int j = 0; j < RN; ++j) {
                    const int8_t * xq = x[j][b].qs;
                    __m512i s = _mm512_madd_epi16(_mm512_maddubs_epi16(vals[0], _mm512_loadu_si512(xq)), sc_words[0]);
                    for (int k = 1; k < 4; ++k) {
                        s = add_pair_products(s, _mm512_maddubs_epi16(vals[k], _mm512_loadu_si512(xq + 64 * k)),
                                              sc_words[k]);
                    }
                    const float dx = x[j][b].d;
                    CellLanes512 & l = lanes[i][j];
                    l.a = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dw16), _mm512_set1_ps(dx), l.a);
                    const __m256 o = _mm256_cvtepi32_ps(offsets(scales, x[j][b]));
                    l.b = _mm256_fmadd_ps(_mm256_mul_ps(o, dw8), _mm256_set1_ps(dx), l.b);
                }
            }
        });
    }
};

template <int RM, int RN>
void tile_avx512(const BlockQ6_K * const * w, const GgmlBlockQ8_K * const * x, const int64_t * bounds, int64_t n_blocks,
                 double * out, int64_t ld) {
    in_cores<RM, RN, 8, Avx512Core>(w, x, bounds, n_blocks, out, ld);
}
#endif

// Every path's tiles (run_tile).
struct Paths {
    template <int RM, int RN>
    static constexpr auto scalar = &tile_scalar<RM, RN>;
#if defined(LLAMA_TP_KCELLS_AVX2)
    template <int RM, int RN>
    static constexpr auto avx2 = &tile_avx2<RM, RN>;
#endif
#if defined(LLAMA_TP_KCELLS_AVX512)
    template <int RM, int RN>
    static constexpr auto avx512 = &tile_avx512<RM, RN>;
#endif
};

}  // namespace

void q6k_tile(KQuantKernel kernel, const BlockQ6_K * const * w, int nr, const GgmlBlockQ8_K * const * x, int nc,
              const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld) {
    run_tile<Paths>(kernel, w, nr, x, nc, bounds, n_blocks, out, ld);
}

}  // namespace ggml_ext
