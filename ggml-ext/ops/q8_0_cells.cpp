#include "ggml-ext/ops/q8_0_cells.h"

#include "ggml-ext/ops/k_cells_totals.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "ggml-cpu.h"

namespace ggml_ext {

static_assert(sizeof(BlockQ8_0) == 34, "the layout of ggml's block_q8_0");
static_assert(sizeof(BlockQ4_0) == 18, "the layout of ggml's block_q4_0");

namespace {

using namespace kcells;

// A = fma(d_w * d_x, float(S), A).
void add_block32(float & a, int32_t S, float dw, float dx) {
    a = std::fma(dw * dx, (float) S, a);
}

// The value k of a block.
int value_of(const BlockQ8_0 & wb, int k) {
    return wb.qs[k];
}

int value_of(const BlockQ4_0 & wb, int k) {
    return (k < 16 ? wb.qs[k] & 15 : wb.qs[k - 16] >> 4) - 8;
}

// vpdpbusd multiplies unsigned bytes by signed ones: the rows' values go in
// as v + bias (unsigned; q4_0's nibbles as they are), and each token starts
// its sums at -bias * x.
template <typename Block>
constexpr int kValueBias = 0;
template <>
constexpr int kValueBias<BlockQ8_0> = 128;
template <>
constexpr int kValueBias<BlockQ4_0> = 8;

template <typename BlockW, int RM, int RN>
void tile_scalar(const BlockW * const * w, const BlockQ8_0 * const * x, const int64_t * bounds, int64_t n_blocks,
                 double * out, int64_t ld) {
    run_cells<RM, RN, CellLane>(bounds, n_blocks, out, ld, [&](int64_t b, CellLane(&lanes)[RM][RN]) {
        for (int i = 0; i < RM; ++i) {
            const BlockW & wb = w[i][b];
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
// A block's 32 values as signed bytes.
__m256i values256(const BlockQ8_0 & wb) {
    return load256(wb.qs);
}

// q4_0: its bytes' low nibbles, then their high ones, less 8.
__m256i values256(const BlockQ4_0 & wb) {
    const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(wb.qs)));
    const __m256i n = _mm256_and_si256(_mm256_srlv_epi64(bytes, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0f));
    return _mm256_sub_epi8(n, _mm256_set1_epi8(8));
}

// Up to four rows and tokens in all.
template <int RM, int RN>
struct Avx2Core {
    template <typename BlockW>
    static void run(const BlockW * const * w, const BlockQ8_0 * const * x, const int64_t * bounds, int64_t n_blocks,
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

template <typename BlockW, int RM, int RN>
void tile_avx2(const BlockW * const * w, const BlockQ8_0 * const * x, const int64_t * bounds, int64_t n_blocks,
               double * out, int64_t ld) {
    tile_256<Avx2Core, RM, RN>(w, x, bounds, n_blocks, out, ld);
}
#endif

#if defined(LLAMA_TP_KCELLS_AVX512)
// Blocks b and b + 1 of a q8_0 row as its bytes (two: the second is in the
// cell; else zeros).
__m512i pair_bytes(const BlockQ8_0 * row, int64_t b, bool two) {
    const __m256i second = two ? load256(row[b + 1].qs) : _mm256_setzero_si256();
    return _mm512_inserti64x4(_mm512_castsi256_si512(load256(row[b].qs)), second, 1);
}

// The same of a q4_0 row as its nibbles, the values plus 8.
__m512i pair_nibbles(const BlockQ4_0 * row, int64_t b, bool two) {
    const __m128i first = _mm_loadu_si128(reinterpret_cast<const __m128i *>(row[b].qs));
    const __m128i second =
        two ? _mm_loadu_si128(reinterpret_cast<const __m128i *>(row[b + 1].qs)) : _mm_setzero_si128();
    const __m512i bytes = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3),
                                                   _mm512_castsi256_si512(_mm256_set_m128i(second, first)));
    return _mm512_and_si512(_mm512_srlv_epi64(bytes, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)),
                            _mm512_set1_epi8(0x0f));
}

#if defined(__AVX512VNNI__)
__m512i pair_unsigned(const BlockQ8_0 * row, int64_t b, bool two) {
    return _mm512_xor_si512(pair_bytes(row, b, two), _mm512_set1_epi8((char) 0x80));
}
__m512i pair_unsigned(const BlockQ4_0 * row, int64_t b, bool two) {
    return pair_nibbles(row, b, two);
}
#else
// The values as signed bytes.
__m512i pair_values(const BlockQ8_0 * row, int64_t b, bool two) {
    return pair_bytes(row, b, two);
}
__m512i pair_values(const BlockQ4_0 * row, int64_t b, bool two) {
    return _mm512_sub_epi8(pair_nibbles(row, b, two), _mm512_set1_epi8(8));
}
#endif

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
    template <typename BlockW>
    static __m256 scale_products(const BlockW * const * w, const BlockQ8_0 * const * x, int64_t b) {
        const __m256 dw = _mm256_cvtph_ps(scales(w, b, std::make_index_sequence<RM>()));
        const __m256 dx = _mm256_cvtph_ps(scales(x, b, std::make_index_sequence<RN>()));
        const __m256i row = _mm256_setr_epi32(0 / RN, 1 / RN, 2 / RN, 3 / RN, 4 / RN, 5 / RN, 6 / RN, 7 / RN);
        const __m256i token = _mm256_setr_epi32(0 % RN, 1 % RN, 2 % RN, 3 % RN, 4 % RN, 5 % RN, 6 % RN, 7 % RN);
        return _mm256_mul_ps(_mm256_permutevar8x32_ps(dw, row), _mm256_permutevar8x32_ps(dx, token));
    }

    // s[i * RN + j]: each four products of row i's blocks b, b + 1 with
    // token j's, summed.
    template <typename BlockW>
    static void products(const BlockW * const * w, const BlockQ8_0 * const * x, int64_t b, bool two, __m512i (&s)[8]) {
        __m512i xv[RN];
        for (int j = 0; j < RN; ++j) xv[j] = pair_bytes(x[j], b, two);
#if defined(__AVX512VNNI__)
        __m512i start[RN];
        const __m512i bias = _mm512_set1_epi8((char) kValueBias<BlockW>);
        for (int j = 0; j < RN; ++j) {
            start[j] =
                _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, xv[j]));
        }
        for (int i = 0; i < RM; ++i) {
            const __m512i u = pair_unsigned(w[i], b, two);
            for (int j = 0; j < RN; ++j) s[i * RN + j] = _mm512_dpbusd_epi32(start[j], u, xv[j]);
        }
#else
        // |v| times x with v's sign: maddubs takes one unsigned side.
        const __m512i ones = _mm512_set1_epi16(1);
        for (int i = 0; i < RM; ++i) {
            const __m512i v = pair_values(w[i], b, two), magnitude = _mm512_abs_epi8(v);
            const __mmask64 negative = _mm512_movepi8_mask(v);
            for (int j = 0; j < RN; ++j) {
                const __m512i signed_x = _mm512_mask_sub_epi8(xv[j], negative, _mm512_setzero_si512(), xv[j]);
                s[i * RN + j] = _mm512_madd_epi16(_mm512_maddubs_epi16(magnitude, signed_x), ones);
            }
        }
#endif
    }

    template <typename BlockW>
    static void run(const BlockW * const * w, const BlockQ8_0 * const * x, const int64_t * bounds, int64_t n_blocks,
                    double * out, int64_t ld) {
        __m512d total = _mm512_setzero_pd();
        for (int64_t b = 0, c = 1; b < n_blocks; ++c) {
            __m256 A = _mm256_setzero_ps();
            while (b < bounds[c]) {
                const bool two = b + 1 < bounds[c];
                __m512i s[8];
                for (int n = RM * RN; n < 8; ++n) s[n] = _mm512_setzero_si512();
                products(w, x, b, two, s);
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

template <typename BlockW, int RM, int RN>
void tile_avx512(const BlockW * const * w, const BlockQ8_0 * const * x, const int64_t * bounds, int64_t n_blocks,
                 double * out, int64_t ld) {
    in_cores<RM, RN, 8, Avx512Core>(w, x, bounds, n_blocks, out, ld);
}
#endif

// Every path's tiles for rows of BlockW (run_tile).
template <typename BlockW>
struct Paths {
    template <int RM, int RN>
    static constexpr auto scalar = &tile_scalar<BlockW, RM, RN>;
#if defined(LLAMA_TP_KCELLS_AVX2)
    template <int RM, int RN>
    static constexpr auto avx2 = &tile_avx2<BlockW, RM, RN>;
#endif
#if defined(LLAMA_TP_KCELLS_AVX512)
    template <int RM, int RN>
    static constexpr auto avx512 = &tile_avx512<BlockW, RM, RN>;
#endif
};

}  // namespace

void q80_tile(KQuantKernel kernel, const BlockQ8_0 * const * w, int nr, const BlockQ8_0 * const * x, int nc,
              const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld) {
    run_tile<Paths<BlockQ8_0>>(kernel, w, nr, x, nc, bounds, n_blocks, out, ld);
}

void q40_tile(KQuantKernel kernel, const BlockQ4_0 * const * w, int nr, const BlockQ8_0 * const * x, int nc,
              const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld) {
    run_tile<Paths<BlockQ4_0>>(kernel, w, nr, x, nc, bounds, n_blocks, out, ld);
}

// The panel decodes eight blocks (256 bytes of each row) at a time.
template <typename Block>
Block32Panel<Block>::Block32Panel(int64_t n_blocks)
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

template <typename Block>
void Block32Panel<Block>::decode(const Block * const * w, int nr) {
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

template <typename Block>
void Block32Panel<Block>::multiply(const BlockQ8_0 * const * x, int nc, const int64_t * bounds, double * out,
                                   int64_t ld) const {
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
template <typename Block>
void Block32Panel<Block>::decode(const Block * const *, int) {
    GGML_ABORT("q8_0 and q4_0 panels need AVX-512 VNNI (kquant_panels_available)");
}

template <typename Block>
void Block32Panel<Block>::multiply(const BlockQ8_0 * const *, int, const int64_t *, double *, int64_t) const {
    GGML_ABORT("q8_0 and q4_0 panels need AVX-512 VNNI (kquant_panels_available)");
}
#endif

template class Block32Panel<BlockQ8_0>;
template class Block32Panel<BlockQ4_0>;

// A register's tokens: eight, in two halves of a 512-bit register.
constexpr int kGroupTokens = 8;

// The groups of eight that nc tokens fill.
int64_t token_groups(int nc) {
    return (nc + kGroupTokens - 1) / kGroupTokens;
}

template <typename Block>
Block32TokenLanes<Block>::Block32TokenLanes(const BlockQ8_0 * const * x, int nc, int64_t n_blocks)
    : nc_(nc),
      n_blocks_(n_blocks),
      stride_((n_blocks + 1) * kGroupTokens),
      values_(token_groups(nc) * 8 * stride_),
      start_(token_groups(nc) * stride_),
      d_(token_groups(nc) * stride_) {
    GGML_ASSERT(nc >= 1 && nc <= kLaneTokens);
    for (int t = 0; t < token_groups(nc) * kGroupTokens; ++t) {
        const int64_t group = t / kGroupTokens, lane = t % kGroupTokens;
        for (int64_t b = 0; b <= n_blocks; ++b) {
            const bool real = t < nc && b < n_blocks;
            int32_t sum = 0;
            for (int g = 0; g < 8; ++g) {
                int32_t four = 0;
                if (real) std::memcpy(&four, x[t][b].qs + 4 * g, sizeof(four));
                values_.data()[(group * 8 + g) * stride_ + b * kGroupTokens + lane] = four;
            }
            if (real) {
                for (int k = 0; k < 32; ++k) sum += x[t][b].qs[k];
            }
            start_.data()[group * stride_ + b * kGroupTokens + lane] = -kValueBias<Block> * sum;
            d_.data()[group * stride_ + b * kGroupTokens + lane] = real ? ggml_fp16_to_fp32(x[t][b].d) : 0.0f;
        }
    }
}

#if defined(LLAMA_TP_KCELLS_PANELS)
namespace {

// d_w of blocks b and b + 1 (two: else d_w(b)) over the low and the high
// eight lanes.
template <typename Block>
__m512 pair_scales(const Block * row, int64_t b, bool two) {
    const int halves = (int) row[b].d | (int) (two ? row[b + 1].d : row[b].d) << 16;
    const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(half, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(halves))));
}

// Rows w[0 .. RM) against the tokens in lanes, two blocks a step: group g
// of each row's pair spread over the eight lanes of its block (vpermd), then
// against group g of the eight tokens of both blocks.
template <int RM, typename Block>
void multiply_lanes(const int32_t * values, const int32_t * start, const float * d, int64_t stride,
                    const Block * const * w, const int64_t * bounds, int64_t n_blocks, int nc, double * out,
                    int64_t ld) {
    constexpr int64_t T = kGroupTokens;
    const __m512i group0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8);
    __m512d total[RM];
    for (int i = 0; i < RM; ++i) total[i] = _mm512_setzero_pd();
    for (int64_t b = 0, c = 1; b < n_blocks; ++c) {
        __m256 A[RM];
        for (int i = 0; i < RM; ++i) A[i] = _mm256_setzero_ps();
        while (b < bounds[c]) {
            const bool two = b + 1 < bounds[c];
            __m512i u[RM], D[RM];
            for (int i = 0; i < RM; ++i) {
                u[i] = pair_unsigned(w[i], b, two);
                D[i] = _mm512_loadu_si512(start + b * T);
            }
            for (int g = 0; g < 8; ++g) {
                const __m512i xg = _mm512_loadu_si512(values + g * stride + b * T);
                const __m512i index = _mm512_add_epi32(group0, _mm512_set1_epi32(g));
                for (int i = 0; i < RM; ++i) {
                    D[i] = _mm512_dpbusd_epi32(D[i], _mm512_permutexvar_epi32(index, u[i]), xg);
                }
            }
            const __m512 dx = _mm512_loadu_ps(d + b * T);
            for (int i = 0; i < RM; ++i) {
                const __m512 dd = _mm512_mul_ps(pair_scales(w[i], b, two), dx), S = _mm512_cvtepi32_ps(D[i]);
                A[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(dd), _mm512_castps512_ps256(S), A[i]);
                if (two) {
                    A[i] = _mm256_fmadd_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(dd), 1)),
                                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(S), 1)), A[i]);
                }
            }
            b += two ? 2 : 1;
        }
        for (int i = 0; i < RM; ++i) total[i] = _mm512_add_pd(total[i], _mm512_cvtps_pd(A[i]));
    }
    for (int i = 0; i < RM; ++i) {
        alignas(64) double t[8];
        _mm512_store_pd(t, total[i]);
        for (int j = 0; j < nc; ++j) out[j * ld + i] = t[j];
    }
}

}  // namespace

template <typename Block>
void Block32TokenLanes<Block>::multiply(const Block * const * w, int nr, const int64_t * bounds, double * out,
                                        int64_t ld) const {
    using Fn = void (*)(const int32_t *, const int32_t *, const float *, int64_t, const Block * const *,
                        const int64_t *, int64_t, int, double *, int64_t);
    static constexpr Fn kRows[kKQuantTileRows] = {multiply_lanes<1, Block>, multiply_lanes<2, Block>,
                                                  multiply_lanes<3, Block>, multiply_lanes<4, Block>};
    // A second group reads the rows again, from the cache.
    for (int group = 0; group * kGroupTokens < nc_; ++group) {
        kRows[nr - 1](values_.data() + group * 8 * stride_, start_.data() + group * stride_,
                      d_.data() + group * stride_, stride_, w, bounds, n_blocks_,
                      std::min(kGroupTokens, nc_ - group * kGroupTokens), out + group * kGroupTokens * ld, ld);
    }
}
#else
template <typename Block>
void Block32TokenLanes<Block>::multiply(const Block * const *, int, const int64_t *, double *, int64_t) const {
    GGML_ABORT("q8_0 and q4_0 token lanes need AVX-512 VNNI (kquant_panels_available)");
}
#endif

template class Block32TokenLanes<BlockQ8_0>;
template class Block32TokenLanes<BlockQ4_0>;

}  // namespace ggml_ext
