#include "ggml-ext/ops/q4_k_cells.h"

#include "ggml-ext/ops/k_cells_totals.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "ggml-cpu.h"

namespace ggml_ext {

static_assert(sizeof(BlockQ4_K) == 144, "the layout of ggml's block_q4_K");
static_assert(sizeof(BlockQ5_K) == 176, "the layout of ggml's block_q5_K");
static_assert(sizeof(BlockQ8_K) == 292, "the layout of ggml's block_q8_K");

namespace {

using namespace kcells;

// Where sub-block j's values start in BlockQ8_K::qs (the pairs' order).
constexpr int kPairOffset[8] = {0, 64, 32, 96, 128, 192, 160, 224};

// The block's eight 6-bit scales and mins, a byte each: the first four of
// each in the low six bits of bytes 0-3 and 4-7, the last four in the
// nibbles of bytes 8-11 with their top two bits in those of bytes 0-7.
struct ScalesMins {
    uint32_t sc_lo, sc_hi, m_lo, m_hi;  // bytes: sc 0-3, sc 4-7, m 0-3, m 4-7

    explicit ScalesMins(const uint8_t * s) {
        uint32_t a, b, c;
        std::memcpy(&a, s, 4);
        std::memcpy(&b, s + 4, 4);
        std::memcpy(&c, s + 8, 4);
        sc_lo = a & 0x3f3f3f3fu;
        m_lo = b & 0x3f3f3f3fu;
        sc_hi = (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4);
        m_hi = ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4);
    }
    int sc(int j) const { return (int) (((j < 4 ? sc_lo : sc_hi) >> (8 * (j & 3))) & 0xff); }
    int m(int j) const { return (int) (((j < 4 ? m_lo : m_hi) >> (8 * (j & 3))) & 0xff); }
};

// Whether the blocks carry a fifth bit (q5_K).
template <typename Block>
constexpr bool kFifthBit = std::is_same_v<Block, BlockQ5_K>;

// The value k of sub-block j.
template <typename Block>
int value_of(const Block & wb, int j, int k) {
    int v = (wb.qs[32 * (j / 2) + k] >> (4 * (j % 2))) & 15;
    if constexpr (kFifthBit<Block>) v |= ((wb.qh[k] >> j) & 1) << 4;
    return v;
}

template <typename Block, int RM, int RN>
void tile_scalar(const Block * const * w, const BlockQ8_K * const * x, const int64_t * bounds, int64_t n_blocks,
                 double * out, int64_t ld) {
    run_cells<RM, RN, CellLanesAB>(bounds, n_blocks, out, ld, [&](int64_t b, CellLanesAB(&lanes)[RM][RN]) {
        for (int i = 0; i < RM; ++i) {
            const Block & wb = w[i][b];
            const ScalesMins sm(wb.scales);
            const float dw = ggml_fp16_to_fp32(wb.d), dmw = ggml_fp16_to_fp32(wb.dmin);
            for (int j = 0; j < RN; ++j) {
                const BlockQ8_K & xb = x[j][b];
                int32_t S = 0;
                for (int sub = 0; sub < 8; ++sub) {
                    int32_t p = 0;
                    for (int k = 0; k < 32; ++k) p += value_of(wb, sub, k) * xb.qs[kPairOffset[sub] + k];
                    S += sm.sc(sub) * p;
                }
                CellLanesAB & l = lanes[i][j];
                add_block(l.a, S, dw, xb.d);
                for (int m = 0; m < kMLanes; ++m) l.b[m] = std::fma(dmw * (float) sm.m(m), xb.sums[m], l.b[m]);
            }
        }
    });
}

#if defined(LLAMA_TP_KCELLS_AVX2)
// dmin_w * m_l, the eight of them.
__m256 scaled_mins(const ScalesMins & sm, float dmw) {
    const __m128i m = _mm_set_epi32(0, 0, (int) sm.m_hi, (int) sm.m_lo);
    return _mm256_mul_ps(_mm256_set1_ps(dmw), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m)));
}

__m256 load_sums(const BlockQ8_K & xb) {
    return _mm256_loadu_ps(xb.sums);
}

// q5_K's fifth bits of sub-block j as bit 4 of each byte (a 16-bit shift
// of up to 4 moves no other byte's bit there).
__m256i fifth_bits(__m256i qh, int j) {
    const __m256i moved =
        j <= 4 ? _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - j)) : _mm256_srl_epi16(qh, _mm_cvtsi32_si128(j - 4));
    return _mm256_and_si256(moved, _mm256_set1_epi8(0x10));
}

// The values of sub-blocks 2q (lo) and 2q + 1 (hi) of a row's block.
template <typename Block>
void values_avx2(const Block & wb, int q, __m256i & lo, __m256i & hi) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i bytes = load256(wb.qs + 32 * q);
    lo = _mm256_and_si256(bytes, low4);
    hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
    if constexpr (kFifthBit<Block>) {
        const __m256i qh = load256(wb.qh);
        lo = _mm256_or_si256(lo, fifth_bits(qh, 2 * q));
        hi = _mm256_or_si256(hi, fifth_bits(qh, 2 * q + 1));
    }
}

template <typename Block>
struct Avx2Cores {
    // Up to four rows and tokens in all (three accumulators each, of 16 registers).
    template <int RM, int RN>
    struct Core {
        static void run(const Block * const * w, const BlockQ8_K * const * x, const int64_t * bounds, int64_t n_blocks,
                        double * out, int64_t ld) {
            run_cells<RM, RN, CellLanesAB256>(
                bounds, n_blocks, out, ld, [&](int64_t b, CellLanesAB256(&lanes)[RM][RN]) {
                    for (int i = 0; i < RM; ++i) {
                        const Block & wb = w[i][b];
                        const ScalesMins sm(wb.scales);
                        __m256i s[RN];
                        for (int j = 0; j < RN; ++j) s[j] = _mm256_setzero_si256();
                        for (int q = 0; q < 4; ++q) {
                            __m256i lo, hi;
                            values_avx2(wb, q, lo, hi);
                            const __m256i sc_lo = _mm256_set1_epi16((short) sm.sc(2 * q));
                            const __m256i sc_hi = _mm256_set1_epi16((short) sm.sc(2 * q + 1));
                            for (int j = 0; j < RN; ++j) {
                                const int8_t * xq = x[j][b].qs;
                                const __m256i p_lo = _mm256_madd_epi16(
                                    _mm256_maddubs_epi16(lo, load256(xq + kPairOffset[2 * q])), sc_lo);
                                const __m256i p_hi = _mm256_madd_epi16(
                                    _mm256_maddubs_epi16(hi, load256(xq + kPairOffset[2 * q + 1])), sc_hi);
                                s[j] = _mm256_add_epi32(s[j], _mm256_add_epi32(p_lo, p_hi));
                            }
                        }
                        const float dw = _cvtsh_ss(wb.d);
                        const __m256 mins = scaled_mins(sm, _cvtsh_ss(wb.dmin));
                        for (int j = 0; j < RN; ++j) {
                            CellLanesAB256 & l = lanes[i][j];
                            add_block(l.a, sum_of(s[j]), dw, x[j][b].d);
                            l.b = _mm256_fmadd_ps(mins, load_sums(x[j][b]), l.b);
                        }
                    }
                });
        }
    };
};

template <typename Block, int RM, int RN>
void tile_avx2(const Block * const * w, const BlockQ8_K * const * x, const int64_t * bounds, int64_t n_blocks,
               double * out, int64_t ld) {
    tile_256<Avx2Cores<Block>::template Core, RM, RN>(w, x, bounds, n_blocks, out, ld);
}
#endif

#if defined(LLAMA_TP_KCELLS_AVX512)
// The sub-block of each word of a register of values (BlockQ8_K's order):
// the sub-blocks (0, 2), (1, 3), (4, 6) and (5, 7), sixteen words each.
constexpr int scale_of_word(int reg, int w) {
    return (reg / 2) * 4 + reg % 2 + (w < 16 ? 0 : 2);
}

// q5_K's fifth bits into the four registers of values, as bit 4 of each
// byte: sub-blocks (0, 2) and (1, 3) shifted left by (4, 2) and (3, 1),
// (4, 6) and (5, 7) right by (0, 2) and (1, 3), each half of a register by
// its own count.
inline void add_fifth_bits(const BlockQ5_K & wb, __m512i * vals) {
    const __m512i qh = _mm512_broadcast_i64x4(load256(wb.qh)), bit4 = _mm512_set1_epi8(0x10);
    auto counts = [](short lo, short hi) {
        return _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1);
    };
    const __m512i moved[4] = {
        _mm512_sllv_epi16(qh, counts(4, 2)),
        _mm512_sllv_epi16(qh, counts(3, 1)),
        _mm512_srlv_epi16(qh, counts(0, 2)),
        _mm512_srlv_epi16(qh, counts(1, 3)),
    };
    for (int k = 0; k < 4; ++k) vals[k] = _mm512_or_si512(vals[k], _mm512_and_si512(moved[k], bit4));
}

// A block's values in four registers in BlockQ8_K's order: sub-blocks
// (0, 2), (1, 3), (4, 6), (5, 7).
template <typename Block>
void values512(const Block & wb, __m512i (&vals)[4]) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512i q01 = _mm512_loadu_si512(wb.qs), q23 = _mm512_loadu_si512(wb.qs + 64);
    vals[0] = _mm512_and_si512(q01, low4);
    vals[1] = _mm512_and_si512(_mm512_srli_epi16(q01, 4), low4);
    vals[2] = _mm512_and_si512(q23, low4);
    vals[3] = _mm512_and_si512(_mm512_srli_epi16(q23, 4), low4);
    if constexpr (kFifthBit<Block>) add_fifth_bits(wb, vals);
}

template <typename Block>
struct Avx512Cores {
    // Up to eight rows x tokens: each output's integers in one register
    // (summed for all at once), its eight B lanes in a half one.
    template <int RM, int RN>
    struct Core {
        static void run(const Block * const * w, const BlockQ8_K * const * x, const int64_t * bounds, int64_t n_blocks,
                        double * out, int64_t ld) {
            static const WordScales<scale_of_word> kWordScales;
            static_assert(RM * RN <= 8, "sum_each's eight outputs");
            run_cells<RM, RN, CellLanesAB256>(
                bounds, n_blocks, out, ld, [&](int64_t b, CellLanesAB256(&lanes)[RM][RN]) {
                    __m512i s[8];
                    for (int n = RM * RN; n < 8; ++n) s[n] = _mm512_setzero_si512();
                    for (int i = 0; i < RM; ++i) {
                        const Block & wb = w[i][b];
                        const ScalesMins sm(wb.scales);
                        __m512i vals[4];
                        values512(wb, vals);
                        const __m512i sc = _mm512_zextsi128_si512(
                            _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int) sm.sc_hi, (int) sm.sc_lo)));
                        __m512i scales[4];
                        for (int k = 0; k < 4; ++k) scales[k] = kWordScales.spread(k, sc);
                        const __m256 mins = scaled_mins(sm, _cvtsh_ss(wb.dmin));
                        for (int j = 0; j < RN; ++j) {
                            const int8_t * xq = x[j][b].qs;
                            __m512i & sn = s[i * RN + j];
                            sn = _mm512_madd_epi16(_mm512_maddubs_epi16(vals[0], _mm512_loadu_si512(xq)), scales[0]);
                            for (int k = 1; k < 4; ++k) {
                                sn = add_pair_products(
                                    sn, _mm512_maddubs_epi16(vals[k], _mm512_loadu_si512(xq + 64 * k)), scales[k]);
                            }
                            lanes[i][j].b = _mm256_fmadd_ps(mins, load_sums(x[j][b]), lanes[i][j].b);
                        }
                    }
                    alignas(32) int32_t S[8];
                    _mm256_store_si256(reinterpret_cast<__m256i *>(S), sum_each(s));
                    for (int i = 0; i < RM; ++i) {
                        const float dw = _cvtsh_ss(w[i][b].d);
                        for (int j = 0; j < RN; ++j) add_block(lanes[i][j].a, S[i * RN + j], dw, x[j][b].d);
                    }
                });
        }
    };
};

template <typename Block, int RM, int RN>
void tile_avx512(const Block * const * w, const BlockQ8_K * const * x, const int64_t * bounds, int64_t n_blocks,
                 double * out, int64_t ld) {
    in_cores<RM, RN, 8, Avx512Cores<Block>::template Core>(w, x, bounds, n_blocks, out, ld);
}
#endif

// Every path's tiles for one block type (run_tile).
template <typename Block>
struct Paths {
    template <int RM, int RN>
    static constexpr auto scalar = &tile_scalar<Block, RM, RN>;
#if defined(LLAMA_TP_KCELLS_AVX2)
    template <int RM, int RN>
    static constexpr auto avx2 = &tile_avx2<Block, RM, RN>;
#endif
#if defined(LLAMA_TP_KCELLS_AVX512)
    template <int RM, int RN>
    static constexpr auto avx512 = &tile_avx512<Block, RM, RN>;
#endif
};

}  // namespace

void q4k_lay_out(void * blocks, int64_t n) {
    BlockQ8_K * x = static_cast<BlockQ8_K *>(blocks);
    int8_t ggml_order[256];
    int16_t bsums[16];  // ggml's: sums of 16 values each
    static_assert(sizeof(bsums) == sizeof(BlockQ8_K::sums), "X takes the place of ggml's sums");
    for (int64_t i = 0; i < n; ++i) {
        std::memcpy(ggml_order, x[i].qs, sizeof(ggml_order));
        for (int j = 0; j < 8; ++j) std::memcpy(x[i].qs + kPairOffset[j], ggml_order + 32 * j, 32);
        std::memcpy(bsums, x[i].sums, sizeof(bsums));
        for (int l = 0; l < 8; ++l) x[i].sums[l] = x[i].d * (float) (bsums[2 * l] + bsums[2 * l + 1]);
    }
}

void q4k_tile(KQuantKernel kernel, const BlockQ4_K * const * w, int nr, const BlockQ8_K * const * x, int nc,
              const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld) {
    run_tile<Paths<BlockQ4_K>>(kernel, w, nr, x, nc, bounds, n_blocks, out, ld);
}

void q5k_tile(KQuantKernel kernel, const BlockQ5_K * const * w, int nr, const BlockQ8_K * const * x, int nc,
              const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld) {
    run_tile<Paths<BlockQ5_K>>(kernel, w, nr, x, nc, bounds, n_blocks, out, ld);
}

// One super-block of the panel's rows, sub-blocks s in BlockQ8_K's order
// (s's values at x's bytes 32s ..): vpdpbusd multiplies the values as
// unsigned bytes by x's signed ones.
template <typename Block>
struct Q4KPanel<Block>::PanelBlock {
    uint8_t values[8][8][kPanelRows][4];  // [s][g][row]: values 4g .. 4g+3 of sub-block s
    int32_t scales[8][kPanelRows];        // sc of sub-block s
    float mins[8][kPanelRows];            // dmin_w * m_l, sub-block l in ggml's order
    float d[kPanelRows];
};

template <typename Block>
Q4KPanel<Block>::Q4KPanel(int64_t n_blocks) : n_blocks_(n_blocks), blocks_(n_blocks) {}

#if defined(LLAMA_TP_KCELLS_PANELS)
namespace {

// Tokens x[0 .. NT) against a decoded panel.
template <typename PanelBlock, int NT>
void multiply_panel(const PanelBlock * blocks, const BlockQ8_K * const * x, const int64_t * bounds, int64_t n_blocks,
                    double * out, int64_t ld) {
    PanelTotals total[NT];
    for (int64_t b = 0, c = 1; b < n_blocks; ++c) {
        __m512 A[NT], B[NT][kMLanes];
        for (int t = 0; t < NT; ++t) {
            A[t] = _mm512_setzero_ps();
            for (int l = 0; l < kMLanes; ++l) B[t][l] = _mm512_setzero_ps();
        }
        for (; b < bounds[c]; ++b) {
            const PanelBlock & pb = blocks[b];
            __m512i S[NT];
            for (int t = 0; t < NT; ++t) S[t] = _mm512_setzero_si512();
            for (int s = 0; s < 8; ++s) {
                __m512i D[NT];
                for (int t = 0; t < NT; ++t) D[t] = _mm512_setzero_si512();
                for (int g = 0; g < 8; ++g) {
                    const __m512i w = _mm512_load_si512(pb.values[s][g]);
                    for (int t = 0; t < NT; ++t) {
                        int32_t four;
                        std::memcpy(&four, x[t][b].qs + 32 * s + 4 * g, sizeof(four));
                        D[t] = _mm512_dpbusd_epi32(D[t], w, _mm512_set1_epi32(four));
                    }
                }
                const __m512i sc = _mm512_load_si512(pb.scales[s]);
                for (int t = 0; t < NT; ++t) S[t] = _mm512_add_epi32(S[t], _mm512_mullo_epi32(D[t], sc));
            }
            const __m512 dw = _mm512_load_ps(pb.d);
            for (int t = 0; t < NT; ++t) {
                A[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(S[t]), dw), _mm512_set1_ps(x[t][b].d), A[t]);
            }
            for (int l = 0; l < kMLanes; ++l) {
                const __m512 m = _mm512_load_ps(pb.mins[l]);
                for (int t = 0; t < NT; ++t) B[t][l] = _mm512_fmadd_ps(m, _mm512_set1_ps(x[t][b].sums[l]), B[t][l]);
            }
        }
        for (int t = 0; t < NT; ++t) {
            // fold(B) row by row, in fold's order.
            __m512 f[4];
            for (int l = 0; l < 4; ++l) f[l] = _mm512_add_ps(B[t][l], B[t][l + 4]);
            for (int l = 0; l < 2; ++l) f[l] = _mm512_add_ps(f[l], f[l + 2]);
            const __m512 F = _mm512_sub_ps(A[t], _mm512_add_ps(f[0], f[1]));
            total[t].add(F);
        }
    }
    for (int t = 0; t < NT; ++t) total[t].store(out + t * ld);
}

}  // namespace

template <typename Block>
void Q4KPanel<Block>::decode(const Block * const * w, int nr) {
    // The sub-block of each of BlockQ8_K's places (kPairOffset's inverse).
    constexpr int kSubBlockAt[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    alignas(64) int8_t rows[kPanelRows][256] = {};
    for (int64_t b = 0; b < n_blocks_; ++b) {
        PanelBlock & pb = blocks_.data()[b];
        for (int r = 0; r < kPanelRows; ++r) {
            if (r >= nr) {
                for (int s = 0; s < 8; ++s) {
                    pb.scales[s][r] = 0;
                    pb.mins[s][r] = 0.0f;
                }
                pb.d[r] = 0.0f;
                continue;
            }
            const Block & wb = w[r][b];
            __m512i vals[4];
            values512(wb, vals);
            for (int k = 0; k < 4; ++k) _mm512_store_si512(rows[r] + 64 * k, vals[k]);
            const ScalesMins sm(wb.scales);
            const float dmw = _cvtsh_ss(wb.dmin);
            for (int s = 0; s < 8; ++s) {
                pb.scales[s][r] = sm.sc(kSubBlockAt[s]);
                pb.mins[s][r] = dmw * (float) sm.m(s);
            }
            pb.d[r] = _cvtsh_ss(wb.d);
        }
        for (int k = 0; k < 4; ++k) transpose_16(rows, k, &pb.values[0][0][0][0] + 64 * 16 * k);
    }
}

template <typename Block>
void Q4KPanel<Block>::multiply(const BlockQ8_K * const * x, int nc, const int64_t * bounds, double * out,
                               int64_t ld) const {
    using Fn = void (*)(const PanelBlock *, const BlockQ8_K * const *, const int64_t *, int64_t, double *, int64_t);
    static constexpr Fn kGroups[8] = {multiply_panel<PanelBlock, 1>, multiply_panel<PanelBlock, 2>,
                                      multiply_panel<PanelBlock, 3>, multiply_panel<PanelBlock, 4>,
                                      multiply_panel<PanelBlock, 5>, multiply_panel<PanelBlock, 6>,
                                      multiply_panel<PanelBlock, 7>, multiply_panel<PanelBlock, 8>};
    for (int j = 0; j < nc; j += 8) {
        kGroups[std::min(8, nc - j) - 1](blocks_.data(), x + j, bounds, n_blocks_, out + j * ld, ld);
    }
}
#else
template <typename Block>
void Q4KPanel<Block>::decode(const Block * const *, int) {
    GGML_ABORT("q4_K panels need AVX-512 VNNI (kquant_panels_available)");
}

template <typename Block>
void Q4KPanel<Block>::multiply(const BlockQ8_K * const *, int, const int64_t *, double *, int64_t) const {
    GGML_ABORT("q4_K panels need AVX-512 VNNI (kquant_panels_available)");
}
#endif

template class Q4KPanel<BlockQ4_K>;
template class Q4KPanel<BlockQ5_K>;

}  // namespace ggml_ext
