#include "ggml-ext/ops/iq4_xs_cells.h"

#include "ggml-ext/ops/k_cells_totals.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ggml-cpu.h"

namespace ggml_ext {

static_assert(sizeof(BlockIQ4_XS) == 136, "the layout of ggml's block_iq4_xs");

namespace {

using namespace kcells;

// The level of each four-bit index: ggml's kvalues_iq4nl (ggml-common.h),
// a fact of the format.
alignas(16) constexpr int8_t kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Sub-block j's scale sc_j.
int scale_of(const BlockIQ4_XS & wb, int j) {
    const int low = (wb.scales_l[j / 2] >> (4 * (j % 2))) & 15, high = (wb.scales_h >> (2 * j)) & 3;
    return (low | high << 4) - 32;
}

// The value k of sub-block j.
int value_of(const BlockIQ4_XS & wb, int j, int k) {
    const int byte = wb.qs[16 * j + k % 16];
    return kLevels[k < 16 ? byte & 15 : byte >> 4];
}

template <int RM, int RN>
void tile_scalar(const BlockIQ4_XS * const * w, const GgmlBlockQ8_K * const * x, const int64_t * bounds,
                 int64_t n_blocks, double * out, int64_t ld) {
    run_cells<RM, RN, CellLane>(bounds, n_blocks, out, ld, [&](int64_t b, CellLane(&lanes)[RM][RN]) {
        for (int i = 0; i < RM; ++i) {
            const BlockIQ4_XS & wb = w[i][b];
            for (int j = 0; j < RN; ++j) {
                const GgmlBlockQ8_K & xb = x[j][b];
                int32_t S = 0;
                for (int sub = 0; sub < 8; ++sub) {
                    int32_t p = 0;
                    for (int k = 0; k < 32; ++k) p += value_of(wb, sub, k) * xb.qs[32 * sub + k];
                    S += scale_of(wb, sub) * p;
                }
                add_block(lanes[i][j].a, S, ggml_fp16_to_fp32(wb.d), xb.d);
            }
        }
    });
}

#if defined(LLAMA_TP_KCELLS_AVX2)
// The eight scales as words: the low nibbles of scales_l in order, and
// scales_h's two-bit field j moved to the top of word j (times 2^(14 - 2j))
// and down to bits 4-5.
__m128i scale_words(const BlockIQ4_XS & wb) {
    uint32_t l;
    std::memcpy(&l, wb.scales_l, sizeof(l));
    const __m128i low4 = _mm_set1_epi8(0x0f), bytes = _mm_cvtsi32_si128((int) l);
    const __m128i nibbles =
        _mm_unpacklo_epi8(_mm_and_si128(bytes, low4), _mm_and_si128(_mm_srli_epi16(bytes, 4), low4));
    const __m128i tops =
        _mm_mullo_epi16(_mm_set1_epi16((short) wb.scales_h), _mm_set_epi16(1, 4, 16, 64, 256, 1024, 4096, 16384));
    const __m128i high = _mm_slli_epi16(_mm_srli_epi16(tops, 14), 4);
    return _mm_sub_epi16(_mm_or_si128(_mm_cvtepu8_epi16(nibbles), high), _mm_set1_epi16(32));
}

// The levels in each 128-bit lane, for byte shuffles.
__m256i levels256() {
    return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i *>(kLevels)));
}

// Sub-block j's 32 values: its bytes' low nibbles, then their high ones.
__m256i values_avx2(const BlockIQ4_XS & wb, int j, __m256i levels) {
    const __m256i bytes =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(wb.qs + 16 * j)));
    const __m256i index =
        _mm256_and_si256(_mm256_srlv_epi64(bytes, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0f));
    return _mm256_shuffle_epi8(levels, index);
}

// Up to four rows and tokens in all.
template <int RM, int RN>
struct Avx2Core {
    static void run(const BlockIQ4_XS * const * w, const GgmlBlockQ8_K * const * x, const int64_t * bounds,
                    int64_t n_blocks, double * out, int64_t ld) {
        const __m256i levels = levels256();
        run_cells<RM, RN, CellLane>(bounds, n_blocks, out, ld, [&](int64_t b, CellLane(&lanes)[RM][RN]) {
            for (int i = 0; i < RM; ++i) {
                const BlockIQ4_XS & wb = w[i][b];
                alignas(16) int16_t sc[8];
                _mm_store_si128(reinterpret_cast<__m128i *>(sc), scale_words(wb));
                __m256i s[RN];
                for (int j = 0; j < RN; ++j) s[j] = _mm256_setzero_si256();
                for (int sub = 0; sub < 8; ++sub) {
                    // |v| times x with v's sign: maddubs takes one unsigned side.
                    const __m256i v = values_avx2(wb, sub, levels), magnitude = _mm256_sign_epi8(v, v);
                    const __m256i scale = _mm256_set1_epi16(sc[sub]);
                    for (int j = 0; j < RN; ++j) {
                        const __m256i signed_x = _mm256_sign_epi8(load256(x[j][b].qs + 32 * sub), v);
                        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed_x), scale);
                        s[j] = _mm256_add_epi32(s[j], p);
                    }
                }
                const float dw = _cvtsh_ss(wb.d);
                for (int j = 0; j < RN; ++j) add_block(lanes[i][j].a, sum_of(s[j]), dw, x[j][b].d);
            }
        });
    }
};

template <int RM, int RN>
void tile_avx2(const BlockIQ4_XS * const * w, const GgmlBlockQ8_K * const * x, const int64_t * bounds, int64_t n_blocks,
               double * out, int64_t ld) {
    tile_256<Avx2Core, RM, RN>(w, x, bounds, n_blocks, out, ld);
}
#endif

#if defined(LLAMA_TP_KCELLS_AVX512)
// The block's values in four registers, k holding sub-blocks 2k and 2k + 1
// in x's order: each sub-block's low nibbles, then its high ones.
void values512(const BlockIQ4_XS & wb, __m512i levels, __m512i (&v)[4]) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    // 64-bit lanes of (low, high): sub-blocks 4h + (0, 1) and 4h + (2, 3).
    const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    for (int h = 0; h < 2; ++h) {
        const __m512i bytes = _mm512_loadu_si512(wb.qs + 64 * h);
        const __m512i low = _mm512_shuffle_epi8(levels, _mm512_and_si512(bytes, low4));
        const __m512i high = _mm512_shuffle_epi8(levels, _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low4));
        v[2 * h] = _mm512_permutex2var_epi64(low, first, high);
        v[2 * h + 1] = _mm512_permutex2var_epi64(low, second, high);
    }
}

// The values as magnitudes and signs: maddubs takes one unsigned side.
struct Values512 {
    __m512i magnitude[4];
    __mmask64 negative[4];

    Values512(const BlockIQ4_XS & wb, __m512i levels) {
        __m512i v[4];
        values512(wb, levels, v);
        for (int k = 0; k < 4; ++k) {
            magnitude[k] = _mm512_abs_epi8(v[k]);
            negative[k] = _mm512_movepi8_mask(v[k]);
        }
    }
};

// The sub-block of each word of register k: 2k's, then 2k + 1's.
constexpr int scale_of_word(int k, int w) {
    return 2 * k + w / 16;
}

// Up to eight rows x tokens, output n = i * RN + j in lane n: each block's
// integers summed for all of them at once, the floats of A side by side.
template <int RM, int RN>
struct Avx512Core {
    static_assert(RM * RN <= 8, "eight lanes of A");

    static void run(const BlockIQ4_XS * const * w, const GgmlBlockQ8_K * const * x, const int64_t * bounds,
                    int64_t n_blocks, double * out, int64_t ld) {
        static const WordScales<scale_of_word> kWordScales;
        const __m512i levels = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i *>(kLevels)));
        __m512d total = _mm512_setzero_pd();
        for (int64_t b = 0, c = 1; b < n_blocks; ++c) {
            __m256 A = _mm256_setzero_ps();
            for (; b < bounds[c]; ++b) {
                __m512i s[8];
                alignas(32) float dw[8] = {}, dx[8] = {};
                for (int n = RM * RN; n < 8; ++n) s[n] = _mm512_setzero_si512();
                for (int i = 0; i < RM; ++i) {
                    const BlockIQ4_XS & wb = w[i][b];
                    const Values512 v(wb, levels);  // |v| times x with v's sign
                    const __m512i sc = _mm512_zextsi128_si512(scale_words(wb));
                    __m512i scales[4];
                    for (int k = 0; k < 4; ++k) scales[k] = kWordScales.spread(k, sc);
                    for (int j = 0; j < RN; ++j) {
                        const int8_t * xq = x[j][b].qs;
                        auto products = [&](int k) {
                            const __m512i xk = _mm512_loadu_si512(xq + 64 * k);
                            return _mm512_maddubs_epi16(
                                v.magnitude[k], _mm512_mask_sub_epi8(xk, v.negative[k], _mm512_setzero_si512(), xk));
                        };
                        __m512i & sn = s[i * RN + j];
                        sn = _mm512_madd_epi16(products(0), scales[0]);
                        for (int k = 1; k < 4; ++k) sn = add_pair_products(sn, products(k), scales[k]);
                        dw[i * RN + j] = _cvtsh_ss(wb.d);
                        dx[i * RN + j] = x[j][b].d;
                    }
                }
                const __m256 S = _mm256_cvtepi32_ps(sum_each(s));
                A = _mm256_fmadd_ps(_mm256_mul_ps(S, _mm256_load_ps(dw)), _mm256_load_ps(dx), A);
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
void tile_avx512(const BlockIQ4_XS * const * w, const GgmlBlockQ8_K * const * x, const int64_t * bounds,
                 int64_t n_blocks, double * out, int64_t ld) {
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

void iq4xs_tile(KQuantKernel kernel, const BlockIQ4_XS * const * w, int nr, const GgmlBlockQ8_K * const * x, int nc,
                const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld) {
    run_tile<Paths>(kernel, w, nr, x, nc, bounds, n_blocks, out, ld);
}

// One super-block of the panel's rows. vpdpbusd multiplies unsigned bytes
// by signed ones: the tokens' bytes go in as x + 128 and bias takes
// 128 * sum_j sc_j * (the sum of sub-block j's values) back out of S.
struct IQ4Panel::Block {
    int8_t values[8][8][kPanelRows][4];  // [j][g][row]: values 4g .. 4g+3 of sub-block j
    int32_t scales[8][kPanelRows];       // sc_j of each row
    int32_t bias[kPanelRows];
    float d[kPanelRows];
};

IQ4Panel::IQ4Panel(int64_t n_blocks) : n_blocks_(n_blocks), blocks_(n_blocks) {}

#if defined(LLAMA_TP_KCELLS_PANELS)
namespace {

// Row r's values of block b into the panel, and its scales, bias and d.
void decode_row(const BlockIQ4_XS & wb, int r, __m512i levels, int8_t (*rows)[256], int32_t * scales, int32_t & bias,
                float & d) {
    static const WordScales<scale_of_word> kWordScales;
    __m512i v[4];
    values512(wb, levels, v);
    const __m128i sc8 = scale_words(wb);
    const __m512i sc = _mm512_zextsi128_si512(sc8);
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i sums = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) {
        _mm512_store_si512(rows[r] + 64 * k, v[k]);
        const __m512i scale = kWordScales.spread(k, sc);
        sums = _mm512_add_epi32(sums, _mm512_madd_epi16(_mm512_maddubs_epi16(ones, v[k]), scale));
    }
    alignas(16) int16_t words[8];
    _mm_store_si128(reinterpret_cast<__m128i *>(words), sc8);
    for (int j = 0; j < 8; ++j) scales[j * kPanelRows + r] = words[j];
    bias = 128 * _mm512_reduce_add_epi32(sums);
    d = _cvtsh_ss(wb.d);
}

// Tokens x[0 .. NT) against a decoded panel.
template <int NT>
void multiply_panel(const IQ4Panel::Block * blocks, const GgmlBlockQ8_K * const * x, const int64_t * bounds,
                    int64_t n_blocks, double * out, int64_t ld) {
    const __m512i flip = _mm512_set1_epi8((char) 0x80);
    PanelTotals total[NT];
    for (int64_t b = 0, c = 1; b < n_blocks; ++c) {
        __m512 A[NT];
        for (int t = 0; t < NT; ++t) A[t] = _mm512_setzero_ps();
        for (; b < bounds[c]; ++b) {
            const IQ4Panel::Block & pb = blocks[b];
            alignas(64) uint8_t xs[NT][256];  // x + 128
            for (int t = 0; t < NT; ++t) {
                for (int q = 0; q < 4; ++q) {
                    _mm512_store_si512(xs[t] + 64 * q, _mm512_xor_si512(_mm512_loadu_si512(x[t][b].qs + 64 * q), flip));
                }
            }
            __m512i S[NT];
            for (int t = 0; t < NT; ++t) S[t] = _mm512_setzero_si512();
            for (int j = 0; j < 8; ++j) {
                __m512i D[NT];
                for (int t = 0; t < NT; ++t) D[t] = _mm512_setzero_si512();
                for (int g = 0; g < 8; ++g) {
                    const __m512i w = _mm512_load_si512(pb.values[j][g]);
                    for (int t = 0; t < NT; ++t) {
                        int32_t four;
                        std::memcpy(&four, xs[t] + 32 * j + 4 * g, sizeof(four));
                        D[t] = _mm512_dpbusd_epi32(D[t], _mm512_set1_epi32(four), w);
                    }
                }
                const __m512i sc = _mm512_load_si512(pb.scales[j]);
                for (int t = 0; t < NT; ++t) S[t] = _mm512_add_epi32(S[t], _mm512_mullo_epi32(D[t], sc));
            }
            const __m512i bias = _mm512_load_si512(pb.bias);
            const __m512 dw = _mm512_load_ps(pb.d);
            for (int t = 0; t < NT; ++t) {
                const __m512 s = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(S[t], bias)), dw);
                A[t] = _mm512_fmadd_ps(s, _mm512_set1_ps(x[t][b].d), A[t]);
            }
        }
        for (int t = 0; t < NT; ++t) {
            total[t].add(A[t]);
        }
    }
    for (int t = 0; t < NT; ++t) total[t].store(out + t * ld);
}

}  // namespace

void IQ4Panel::decode(const BlockIQ4_XS * const * w, int nr) {
    const __m512i levels = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i *>(kLevels)));
    alignas(64) int8_t rows[kPanelRows][256] = {};
    for (int64_t b = 0; b < n_blocks_; ++b) {
        Block & pb = blocks_.data()[b];
        for (int r = 0; r < kPanelRows; ++r) {
            if (r < nr) {
                decode_row(w[r][b], r, levels, rows, &pb.scales[0][0], pb.bias[r], pb.d[r]);
            } else {
                for (int j = 0; j < 8; ++j) pb.scales[j][r] = 0;
                pb.bias[r] = 0;
                pb.d[r] = 0.0f;
            }
        }
        for (int k = 0; k < 4; ++k) transpose_16(rows, k, &pb.values[0][0][0][0] + 64 * 16 * k);
    }
}

void IQ4Panel::multiply(const GgmlBlockQ8_K * const * x, int nc, const int64_t * bounds, double * out,
                        int64_t ld) const {
    using Fn = void (*)(const Block *, const GgmlBlockQ8_K * const *, const int64_t *, int64_t, double *, int64_t);
    static constexpr Fn kGroups[8] = {multiply_panel<1>, multiply_panel<2>, multiply_panel<3>, multiply_panel<4>,
                                      multiply_panel<5>, multiply_panel<6>, multiply_panel<7>, multiply_panel<8>};
    for (int j = 0; j < nc; j += 8) {
        kGroups[std::min(8, nc - j) - 1](blocks_.data(), x + j, bounds, n_blocks_, out + j * ld, ld);
    }
}
#else
void IQ4Panel::decode(const BlockIQ4_XS * const *, int) {
    GGML_ABORT("IQ4_XS panels need AVX-512 VNNI (kquant_panels_available)");
}

void IQ4Panel::multiply(const GgmlBlockQ8_K * const *, int, const int64_t *, double *, int64_t) const {
    GGML_ABORT("IQ4_XS panels need AVX-512 VNNI (kquant_panels_available)");
}
#endif

}  // namespace ggml_ext
