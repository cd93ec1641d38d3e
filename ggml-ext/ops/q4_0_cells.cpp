#include "ggml-ext/ops/q4_0_cells.h"

#include "ggml-ext/ops/k_cells_totals.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "ggml-cpu.h"

namespace ggml_ext {

static_assert(sizeof(BlockQ4_0) == 18, "the layout of ggml's block_q4_0");

namespace {

using namespace kcells;

// A = fma(d_w * d_x, float(S), A).
void add_block32(float & a, int32_t S, float dw, float dx) {
    a = std::fma(dw * dx, (float) S, a);
}

// The value k of a block.
int value_of(const BlockQ4_0 & wb, int k) {
    return (k < 16 ? wb.qs[k] & 15 : wb.qs[k - 16] >> 4) - 8;
}

template <int RM, int RN>
void tile_scalar(const BlockQ4_0 * const * w, const BlockQ8_0 * const * x, const int64_t * bounds, int64_t n_blocks,
                 double * out, int64_t ld) {
    run_cells<RM, RN, CellLane>(bounds, n_blocks, out, ld, [&](int64_t b, CellLane(&lanes)[RM][RN]) {
        for (int i = 0; i < RM; ++i) {
            const BlockQ4_0 & wb = w[i][b];
            for (int j = 0; j < RN; ++j) {
                const BlockQ8_0 & xb = x[j][b];
                int32_t S = 0;
                for (int k = 0; k < 32; ++k) S += value_of(wb, k) * xb.qs[k];
                add_block32(lanes[i][j].a, S, ggml_fp16_to_fp32(wb.d), ggml_fp16_to_fp32(xb.d));
            }
        }
    });
}

#if defined(LLAMA_TP_KCELLS_AVX2)
// A block's 32 values as signed bytes: its bytes' low nibbles, then their high ones.
__m256i values256(const BlockQ4_0 & wb) {
    const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(wb.qs)));
    const __m256i n = _mm256_and_si256(_mm256_srlv_epi64(bytes, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0f));
    return _mm256_sub_epi8(n, _mm256_set1_epi8(8));
}

// Up to four rows and tokens in all.
template <int RM, int RN>
struct Avx2Core {
    static void run(const BlockQ4_0 * const * w, const BlockQ8_0 * const * x, const int64_t * bounds, int64_t n_blocks,
                    double * out, int64_t ld) {
        const __m256i ones = _mm256_set1_epi16(1);
        run_cells<RM, RN, CellLane>(bounds, n_blocks, out, ld, [&](int64_t b, CellLane(&lanes)[RM][RN]) {
            for (int i = 0; i < RM; ++i) {
                // |v| times x with v's sign: maddubs takes one unsigned side.
                const __m256i v = values256(w[i][b]), magnitude = _mm256_sign_epi8(v, v);
                const float dw = _cvtsh_ss(w[i][b].d);
                for (int j = 0; j < RN; ++j) {
                    const __m256i signed_x = _mm256_sign_epi8(load256(x[j][b].qs), v);
                    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed_x), ones);
                    add_block32(lanes[i][j].a, sum_of(p), dw, _cvtsh_ss(x[j][b].d));
                }
            }
        });
    }
};

template <int RM, int RN>
void tile_avx2(const BlockQ4_0 * const * w, const BlockQ8_0 * const * x, const int64_t * bounds, int64_t n_blocks,
               double * out, int64_t ld) {
    tile_256<Avx2Core, RM, RN>(w, x, bounds, n_blocks, out, ld);
}
#endif

#if defined(LLAMA_TP_KCELLS_AVX512)
// Blocks b and b + 1 of a row as the nibbles n + 8 (two: the second is in
// the cell; else zeros).
__m512i pair_nibbles(const BlockQ4_0 * row, int64_t b, bool two) {
    const __m128i first = _mm_loadu_si128(reinterpret_cast<const __m128i *>(row[b].qs));
    const __m128i second =
        two ? _mm_loadu_si128(reinterpret_cast<const __m128i *>(row[b + 1].qs)) : _mm_setzero_si128();
    const __m512i bytes = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3),
                                                   _mm512_castsi256_si512(_mm256_set_m128i(second, first)));
    return _mm512_and_si512(_mm512_srlv_epi64(bytes, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)),
                            _mm512_set1_epi8(0x0f));
}

#if !defined(__AVX512VNNI__)
// The same as the signed values n.
__m512i pair_values(const BlockQ4_0 * row, int64_t b, bool two) {
    return _mm512_sub_epi8(pair_nibbles(row, b, two), _mm512_set1_epi8(8));
}
#endif

__m512i pair_x(const BlockQ8_0 * row, int64_t b, bool two) {
    const __m256i second = two ? load256(row[b + 1].qs) : _mm256_setzero_si256();
    return _mm512_inserti64x4(_mm512_castsi256_si512(load256(row[b].qs)), second, 1);
}

// Up to eight rows x tokens, output n = i * RN + j in lane n, two blocks at
// a time: each block's integers summed for all of them at once, the floats
// of A side by side.
template <int RM, int RN>
struct Avx512Core {
    static_assert(RM * RN <= 8, "eight lanes of A");

    // The scales d of block b + h of each of the blocks' rows, as halves in
    // registers (stores of halves and a wide load would stall).
    template <typename Block, size_t... I>
    static __m128i scales(const Block * const * rows, int64_t b, std::index_sequence<I...>) {
        __m128i d = _mm_setzero_si128();
        ((d = _mm_insert_epi16(d, (short) rows[I][b].d, (int) I)), ...);
        return d;
    }

    // d_w(b) * d_x(b) of output n in lane n: row n / RN, token n % RN.
    static __m256 scale_products(const BlockQ4_0 * const * w, const BlockQ8_0 * const * x, int64_t b) {
        const __m256 dw = _mm256_cvtph_ps(scales(w, b, std::make_index_sequence<RM>()));
        const __m256 dx = _mm256_cvtph_ps(scales(x, b, std::make_index_sequence<RN>()));
        const __m256i row = _mm256_setr_epi32(0 / RN, 1 / RN, 2 / RN, 3 / RN, 4 / RN, 5 / RN, 6 / RN, 7 / RN);
        const __m256i token = _mm256_setr_epi32(0 % RN, 1 % RN, 2 % RN, 3 % RN, 4 % RN, 5 % RN, 6 % RN, 7 % RN);
        return _mm256_mul_ps(_mm256_permutevar8x32_ps(dw, row), _mm256_permutevar8x32_ps(dx, token));
    }

    // s[j]: each four products of row's blocks b, b + 1 with token j's, summed.
    static void add_products(const BlockQ4_0 * row, int64_t b, bool two, const __m512i (&xv)[RN], __m512i * s) {
#if defined(__AVX512VNNI__)
        // (n + 8) * x, then 8 * -x: exact in the same lanes.
        const __m512i n = pair_nibbles(row, b, two), eights = _mm512_set1_epi8(8);
        for (int j = 0; j < RN; ++j) {
            const __m512i minus_x = _mm512_sub_epi8(_mm512_setzero_si512(), xv[j]);
            s[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), n, xv[j]), eights, minus_x);
        }
#else
        // |v| times x with v's sign: maddubs takes one unsigned side.
        const __m512i v = pair_values(row, b, two), magnitude = _mm512_abs_epi8(v), ones = _mm512_set1_epi16(1);
        const __mmask64 negative = _mm512_movepi8_mask(v);
        for (int j = 0; j < RN; ++j) {
            const __m512i signed_x = _mm512_mask_sub_epi8(xv[j], negative, _mm512_setzero_si512(), xv[j]);
            s[j] = _mm512_madd_epi16(_mm512_maddubs_epi16(magnitude, signed_x), ones);
        }
#endif
    }

    static void run(const BlockQ4_0 * const * w, const BlockQ8_0 * const * x, const int64_t * bounds, int64_t n_blocks,
                    double * out, int64_t ld) {
        __m512d total = _mm512_setzero_pd();
        for (int64_t b = 0, c = 1; b < n_blocks; ++c) {
            __m256 A = _mm256_setzero_ps();
            while (b < bounds[c]) {
                const bool two = b + 1 < bounds[c];
                __m512i s[8], xv[RN];
                for (int n = RM * RN; n < 8; ++n) s[n] = _mm512_setzero_si512();
                for (int j = 0; j < RN; ++j) xv[j] = pair_x(x[j], b, two);
                for (int i = 0; i < RM; ++i) add_products(w[i], b, two, xv, s + i * RN);
                __m256i S[2];
                sum_halves(s, S[0], S[1]);
                for (int h = 0; h < (two ? 2 : 1); ++h) {
                    A = _mm256_fmadd_ps(scale_products(w, x, b + h), _mm256_cvtepi32_ps(S[h]), A);
                }
                b += two ? 2 : 1;
            }
            total = _mm512_add_pd(total, _mm512_cvtps_pd(A));
        }
        alignas(64) double t[8];
        _mm512_store_pd(t, total);
        for (int i = 0; i < RM; ++i)
            for (int j = 0; j < RN; ++j) out[j * ld + i] = t[i * RN + j];
    }
};

template <int RM, int RN>
void tile_avx512(const BlockQ4_0 * const * w, const BlockQ8_0 * const * x, const int64_t * bounds, int64_t n_blocks,
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

void q40_tile(KQuantKernel kernel, const BlockQ4_0 * const * w, int nr, const BlockQ8_0 * const * x, int nc,
              const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld) {
    run_tile<Paths>(kernel, w, nr, x, nc, bounds, n_blocks, out, ld);
}

// The panel decodes eight blocks (256 bytes of each row) at a time.
Q40Panel::Q40Panel(int64_t n_blocks)
    : n_blocks_(n_blocks),
      n_padded_((n_blocks + 7) / 8 * 8),
      values_(n_padded_ * 32 * kPanelRows),
      bias_(n_padded_ * kPanelRows),
      d_(n_padded_ * kPanelRows) {}

#if defined(LLAMA_TP_KCELLS_PANELS)
namespace {

// Tokens x[0 .. NT) against a decoded panel. vpdpbusd multiplies unsigned
// bytes by signed ones: x goes in as x + 128 and bias takes 128 * the sum of
// the values back out of S.
template <int NT>
void multiply_panel(const int8_t * values, const int32_t * bias, const float * d, const BlockQ8_0 * const * x,
                    const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld) {
    const __m256i flip = _mm256_set1_epi8((char) 0x80);
    PanelTotals total[NT];
    for (int64_t b = 0, c = 1; b < n_blocks; ++c) {
        __m512 A[NT];
        for (int t = 0; t < NT; ++t) A[t] = _mm512_setzero_ps();
        for (; b < bounds[c]; ++b) {
            alignas(32) uint8_t xs[NT][32];  // x + 128
            for (int t = 0; t < NT; ++t) {
                _mm256_store_si256(reinterpret_cast<__m256i *>(xs[t]), _mm256_xor_si256(load256(x[t][b].qs), flip));
            }
            __m512i D[NT];
            for (int t = 0; t < NT; ++t) D[t] = _mm512_setzero_si512();
            for (int g = 0; g < 8; ++g) {
                const __m512i w = _mm512_load_si512(values + (b * 8 + g) * 64);
                for (int t = 0; t < NT; ++t) {
                    int32_t four;
                    std::memcpy(&four, xs[t] + 4 * g, sizeof(four));
                    D[t] = _mm512_dpbusd_epi32(D[t], _mm512_set1_epi32(four), w);
                }
            }
            const __m512i rows_bias = _mm512_load_si512(bias + b * kPanelRows);
            const __m512 dw = _mm512_load_ps(d + b * kPanelRows);
            for (int t = 0; t < NT; ++t) {
                const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(_cvtsh_ss(x[t][b].d)));
                A[t] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(_mm512_sub_epi32(D[t], rows_bias)), A[t]);
            }
        }
        for (int t = 0; t < NT; ++t) {
            total[t].add(A[t]);
        }
    }
    for (int t = 0; t < NT; ++t) total[t].store(out + t * ld);
}

}  // namespace

void Q40Panel::decode(const BlockQ4_0 * const * w, int nr) {
    alignas(64) int8_t rows[kPanelRows][256];
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t b0 = 0; b0 < n_padded_; b0 += 8) {
        for (int r = 0; r < kPanelRows; ++r) {
            for (int q = 0; q < 8; ++q) {
                const int64_t b = b0 + q;
                const bool real = r < nr && b < n_blocks_;
                _mm256_store_si256(reinterpret_cast<__m256i *>(rows[r] + 32 * q),
                                   real ? values256(w[r][b]) : _mm256_setzero_si256());
                d_.data()[b * kPanelRows + r] = real ? _cvtsh_ss(w[r][b].d) : 0.0f;
            }
        }
        for (int k = 0; k < 4; ++k) transpose_16(rows, k, values_.data() + (b0 + 2 * k) * 32 * kPanelRows);
        // Each row's sum of a block's values: its eight groups of four against ones.
        for (int64_t b = b0; b < b0 + 8; ++b) {
            __m512i sum = _mm512_setzero_si512();
            for (int g = 0; g < 8; ++g)
                sum = _mm512_dpbusd_epi32(sum, ones, _mm512_load_si512(values_.data() + (b * 8 + g) * 64));
            _mm512_store_si512(bias_.data() + b * kPanelRows, _mm512_slli_epi32(sum, 7));
        }
    }
}

void Q40Panel::multiply(const BlockQ8_0 * const * x, int nc, const int64_t * bounds, double * out, int64_t ld) const {
    using Fn = void (*)(const int8_t *, const int32_t *, const float *, const BlockQ8_0 * const *, const int64_t *,
                        int64_t, double *, int64_t);
    static constexpr Fn kGroups[8] = {multiply_panel<1>, multiply_panel<2>, multiply_panel<3>, multiply_panel<4>,
                                      multiply_panel<5>, multiply_panel<6>, multiply_panel<7>, multiply_panel<8>};
    for (int j = 0; j < nc; j += 8) {
        kGroups[std::min(8, nc - j) - 1](values_.data(), bias_.data(), d_.data(), x + j, bounds, n_blocks_,
                                         out + j * ld, ld);
    }
}
#else
void Q40Panel::decode(const BlockQ4_0 * const *, int) {
    GGML_ABORT("q4_0 panels need AVX-512 VNNI (kquant_panels_available)");
}

void Q40Panel::multiply(const BlockQ8_0 * const *, int, const int64_t *, double *, int64_t) const {
    GGML_ABORT("q4_0 panels need AVX-512 VNNI (kquant_panels_available)");
}
#endif

}  // namespace ggml_ext
