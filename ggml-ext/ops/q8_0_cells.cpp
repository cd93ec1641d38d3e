#include "ggml-ext/ops/q8_0_cells.h"

#include <cmath>
#include <algorithm>
#include <cstring>

#include "ggml-cpu.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define LLAMA_TP_Q8_AVX2 1
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define LLAMA_TP_Q8_VNNI 1
#define LLAMA_TP_DPBUSD _mm256_dpbusd_epi32
#elif defined(__AVXVNNI__)
#define LLAMA_TP_Q8_VNNI 1
#define LLAMA_TP_DPBUSD _mm256_dpbusd_avx_epi32
#endif
#if defined(__AVX512F__) && defined(__AVX512VNNI__)
#define LLAMA_TP_Q8_AVX512 1
#endif
#endif

// GCC 12's AVX-512 intrinsics pass an undefined register as the unused
// merge source and then warn about it where they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace ggml_ext {

static_assert(sizeof(BlockQ8_0) == 34, "the layout of ggml's block_q8_0");

namespace {

constexpr int kLanes = 8;

// Adds each lane's double to the total, lane 0 first (the same on every path).
double lane_total(const double * lanes) {
    double s = 0.0;
    for (int l = 0; l < kLanes; ++l) s += lanes[l];
    return s;
}

template <int RM, int RN>
void tile_scalar(const BlockQ8_0 * const * w, const BlockQ8_0 * const * x, const int64_t * bounds, int64_t n_blocks,
                 double * out, int64_t ld) {
    double total[RM][RN][kLanes] = {};
    for (int64_t b = 0, c = 1; b < n_blocks; ++c) {
        float acc[RM][RN][kLanes] = {};
        for (; b < bounds[c]; ++b) {
            for (int i = 0; i < RM; ++i) {
                const float dw = ggml_fp16_to_fp32(w[i][b].d);
                for (int j = 0; j < RN; ++j) {
                    const float d = dw * ggml_fp16_to_fp32(x[j][b].d);
                    for (int l = 0; l < kLanes; ++l) {
                        int32_t s = 0;
                        for (int k = 4 * l; k < 4 * l + 4; ++k) s += (int32_t) w[i][b].qs[k] * x[j][b].qs[k];
                        acc[i][j][l] = std::fma(d, (float) s, acc[i][j][l]);
                    }
                }
            }
        }
        for (int i = 0; i < RM; ++i)
            for (int j = 0; j < RN; ++j)
                for (int l = 0; l < kLanes; ++l) total[i][j][l] += (double) acc[i][j][l];
    }
    for (int i = 0; i < RM; ++i)
        for (int j = 0; j < RN; ++j) out[j * ld + i] = lane_total(total[i][j]);
}

#if defined(LLAMA_TP_Q8_AVX2)
float half(ggml_fp16_t h) {
    return _cvtsh_ss(h);
}

__m256i load_qs(const BlockQ8_0 & b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b.qs));
}

// The eight lanes' doubles of one output, kept in registers.
struct LaneTotals {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();

    void add(__m256 acc) {
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(acc)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(acc, 1)));
    }

    double total() const {
        alignas(32) double lanes[kLanes];
        _mm256_store_pd(lanes, lo);
        _mm256_store_pd(lanes + 4, hi);
        return lane_total(lanes);
    }
};

// The two vector paths differ only in how a block's lane sums are formed
// (LaneSums::token prepares a token's bytes once for every row).
template <int RM, int RN, typename LaneSums>
void tile_vector(const BlockQ8_0 * const * w, const BlockQ8_0 * const * x, const int64_t * bounds, int64_t n_blocks,
                 double * out, int64_t ld, const LaneSums & lane_sums) {
    LaneTotals total[RM][RN];
    for (int64_t b = 0, c = 1; b < n_blocks; ++c) {
        __m256 acc[RM][RN];
        for (int i = 0; i < RM; ++i)
            for (int j = 0; j < RN; ++j) acc[i][j] = _mm256_setzero_ps();
        for (; b < bounds[c]; ++b) {
            __m256i xq[RN];
            float dx[RN];
            for (int j = 0; j < RN; ++j) {
                xq[j] = lane_sums.token(load_qs(x[j][b]));
                dx[j] = half(x[j][b].d);
            }
            for (int i = 0; i < RM; ++i) {
                const __m256i wq = load_qs(w[i][b]);
                const float dw = half(w[i][b].d);
                __m256i sums[RN];
                lane_sums(wq, xq, sums);
                for (int j = 0; j < RN; ++j) {
                    acc[i][j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[j]), _mm256_cvtepi32_ps(sums[j]), acc[i][j]);
                }
            }
        }
        for (int i = 0; i < RM; ++i)
            for (int j = 0; j < RN; ++j) total[i][j].add(acc[i][j]);
    }
    for (int i = 0; i < RM; ++i)
        for (int j = 0; j < RN; ++j) out[j * ld + i] = total[i][j].total();
}

// |w| times x with w's sign, in pairs of bytes, then pairs of pairs.
template <int RN>
struct Avx2LaneSums {
    __m256i token(__m256i xq) const { return xq; }

    void operator()(__m256i wq, const __m256i * xq, __m256i * sums) const {
        const __m256i aw = _mm256_abs_epi8(wq);
        const __m256i ones = _mm256_set1_epi16(1);
        for (int j = 0; j < RN; ++j) {
            sums[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq[j], wq)), ones);
        }
    }
};
#endif

#if defined(LLAMA_TP_Q8_VNNI)
// (x + 128) as unsigned bytes times w, less 128 times w's lane sums: the
// correction is the starting value, so each token costs one instruction.
template <int RN>
struct VnniLaneSums {
    const __m256i bias = _mm256_set1_epi8((char) 0x80);

    __m256i token(__m256i xq) const { return _mm256_xor_si256(xq, bias); }

    void operator()(__m256i wq, const __m256i * xu, __m256i * sums) const {
        const __m256i start =
            _mm256_sub_epi32(_mm256_setzero_si256(), LLAMA_TP_DPBUSD(_mm256_setzero_si256(), bias, wq));
        for (int j = 0; j < RN; ++j) sums[j] = LLAMA_TP_DPBUSD(start, xu[j], wq);
    }
};
#endif

#if defined(LLAMA_TP_Q8_AVX512)
// Two tokens per 512-bit register, one in each half, against the row's bytes
// in both halves: one instruction forms the lane sums of two tokens. (A lone
// last token pairs with zeros, whose sums come out zero and are dropped.)
// A pair's register for one block: its bytes plus 128 (unsigned, for
// dpbusd) and its two scales, each over its half.
struct PairBlock {
    __m512i xu;
    __m512 dx;
};

// Forms each pair's register from the tokens' blocks, as a tile reads them.
template <int RN>
struct PairsInline {
    const BlockQ8_0 * const * x;
    PairBlock at(int64_t b, int p) const {
        const __m512i bias = _mm512_set1_epi8((char) 0x80);
        const bool pair = 2 * p + 1 < RN;
        const __m256i lo = load_qs(x[2 * p][b]);
        const __m256i hi = pair ? load_qs(x[2 * p + 1][b]) : _mm256_set1_epi8((char) 0x80);
        const __m256 dlo = _mm256_set1_ps(half(x[2 * p][b].d));
        const __m256 dhi = _mm256_set1_ps(pair ? half(x[2 * p + 1][b].d) : 0.0f);
        return {_mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), bias),
                _mm512_castpd_ps(
                    _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(dlo)), _mm256_castps_pd(dhi), 1))};
    }
};

// Reads them where Q8Tokens laid them out: block by block, pair by pair,
// each pair's bytes then its scales (64 bytes each, in any alignment).
constexpr size_t kPairBytes = 128;

template <int RN>
struct PairsLaidOut {
    const uint8_t * data;
    PairBlock at(int64_t b, int p) const {
        const uint8_t * at = data + (size_t) (b * ((RN + 1) / 2) + p) * kPairBytes;
        return {_mm512_loadu_si512(at), _mm512_loadu_ps(at + 64)};
    }
};

template <int RM, int RN, typename Pairs>
void tile_avx512(const BlockQ8_0 * const * w, const Pairs & pairs, const int64_t * bounds, int64_t n_blocks,
                 double * out, int64_t ld) {
    constexpr int NP = (RN + 1) / 2;
    __m512d total[RM][2 * NP];
    for (int i = 0; i < RM; ++i)
        for (int j = 0; j < 2 * NP; ++j) total[i][j] = _mm512_setzero_pd();
    const __m512i bias = _mm512_set1_epi8((char) 0x80);
    for (int64_t b = 0, c = 1; b < n_blocks; ++c) {
        __m512 acc[RM][NP];
        for (int i = 0; i < RM; ++i)
            for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_setzero_ps();
        for (; b < bounds[c]; ++b) {
            PairBlock xp[NP];
            for (int p = 0; p < NP; ++p) xp[p] = pairs.at(b, p);
            for (int i = 0; i < RM; ++i) {
                const __m512i wq = _mm512_broadcast_i64x4(load_qs(w[i][b]));
                const __m512 dw = _mm512_set1_ps(half(w[i][b].d));
                const __m512i start =
                    _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, wq));
                for (int p = 0; p < NP; ++p) {
                    const __m512i sums = _mm512_dpbusd_epi32(start, xp[p].xu, wq);
                    acc[i][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, xp[p].dx), _mm512_cvtepi32_ps(sums), acc[i][p]);
                }
            }
        }
        for (int i = 0; i < RM; ++i) {
            for (int p = 0; p < NP; ++p) {
                const __m512d halves = _mm512_castps_pd(acc[i][p]);
                const __m256 lo = _mm256_castpd_ps(_mm512_castpd512_pd256(halves));
                const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(halves, 1));
                total[i][2 * p] = _mm512_add_pd(total[i][2 * p], _mm512_cvtps_pd(lo));
                total[i][2 * p + 1] = _mm512_add_pd(total[i][2 * p + 1], _mm512_cvtps_pd(hi));
            }
        }
    }
    for (int i = 0; i < RM; ++i) {
        for (int j = 0; j < RN; ++j) {
            alignas(64) double lanes[kLanes];
            _mm512_store_pd(lanes, total[i][j]);
            out[j * ld + i] = lane_total(lanes);
        }
    }
}

// One token against rows in pairs, one row in each half of a 512-bit
// register: one instruction forms the lane sums of two rows. The bias goes
// on the rows here, (w + 128) as unsigned bytes times x, less 128 times x's
// lane sums, so the correction is the token's and is formed once a block.
// A lone last row pairs with itself; its second copy is dropped.
template <int RM>
void tile_avx512_row_pairs(const BlockQ8_0 * const * w, const BlockQ8_0 * x, const int64_t * bounds, int64_t n_blocks,
                           double * out) {
    constexpr int NP = (RM + 1) / 2;
    const BlockQ8_0 * rows[2 * NP];
    for (int i = 0; i < 2 * NP; ++i) rows[i] = w[std::min(i, RM - 1)];
    __m512d total[2 * NP];
    for (int i = 0; i < 2 * NP; ++i) total[i] = _mm512_setzero_pd();
    const __m512i bias = _mm512_set1_epi8((char) 0x80);
    // Lanes 0-7 take the pair's first scale, 8-15 its second.
    const __m512i first_or_second = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int64_t b = 0, c = 1; b < n_blocks; ++c) {
        __m512 acc[NP];
        for (int p = 0; p < NP; ++p) acc[p] = _mm512_setzero_ps();
        for (; b < bounds[c]; ++b) {
            const __m512i xq = _mm512_broadcast_i64x4(load_qs(x[b]));
            const __m512i start =
                _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, xq));
            const __m128 dx = _mm_set1_ps(half(x[b].d));
            for (int p = 0; p < NP; ++p) {
                const BlockQ8_0 & w0 = rows[2 * p][b];
                const BlockQ8_0 & w1 = rows[2 * p + 1][b];
                const __m512i wu =
                    _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(load_qs(w0)), load_qs(w1), 1), bias);
                const __m512i sums = _mm512_dpbusd_epi32(start, wu, xq);
                // dw * dx of each row, rounded as the other paths round it.
                const __m128 dw = _mm_cvtph_ps(_mm_cvtsi32_si128((int) w0.d | ((int) w1.d << 16)));
                const __m512 d = _mm512_permutexvar_ps(first_or_second, _mm512_castps128_ps512(_mm_mul_ps(dw, dx)));
                acc[p] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sums), acc[p]);
            }
        }
        for (int p = 0; p < NP; ++p) {
            const __m512d halves = _mm512_castps_pd(acc[p]);
            total[2 * p] =
                _mm512_add_pd(total[2 * p], _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_castpd512_pd256(halves))));
            total[2 * p + 1] =
                _mm512_add_pd(total[2 * p + 1], _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(halves, 1))));
        }
    }
    for (int i = 0; i < RM; ++i) {
        alignas(64) double lanes[kLanes];
        _mm512_store_pd(lanes, total[i]);
        out[i] = lane_total(lanes);
    }
}

// Every block's pair registers of RN tokens, for PairsLaidOut.
template <int RN>
void lay_out_pairs(const BlockQ8_0 * const * x, int64_t n_blocks, uint8_t * out) {
    const PairsInline<RN> pairs{x};
    for (int64_t b = 0; b < n_blocks; ++b) {
        for (int p = 0; p < (RN + 1) / 2; ++p) {
            const PairBlock pb = pairs.at(b, p);
            uint8_t * at = out + (size_t) (b * ((RN + 1) / 2) + p) * kPairBytes;
            _mm512_storeu_si512(at, pb.xu);
            _mm512_storeu_ps(at + 64, pb.dx);
        }
    }
}

template <int RM, int RN>
void tile_avx512_laid_out(const BlockQ8_0 * const * w, const uint8_t * tokens, const int64_t * bounds, int64_t n_blocks,
                          double * out, int64_t ld) {
    tile_avx512<RM, RN>(w, PairsLaidOut<RN>{tokens}, bounds, n_blocks, out, ld);
}
#endif

using TileFn = void (*)(const BlockQ8_0 * const *, const BlockQ8_0 * const *, const int64_t *, int64_t, double *,
                        int64_t);

template <int RM, int RN>
void tile_avx2(const BlockQ8_0 * const * w, const BlockQ8_0 * const * x, const int64_t * bounds, int64_t n_blocks,
               double * out, int64_t ld) {
#if defined(LLAMA_TP_Q8_AVX2)
    tile_vector<RM, RN>(w, x, bounds, n_blocks, out, ld, Avx2LaneSums<RN>{});
#else
    tile_scalar<RM, RN>(w, x, bounds, n_blocks, out, ld);
#endif
}

template <int RM, int RN>
void tile_vnni(const BlockQ8_0 * const * w, const BlockQ8_0 * const * x, const int64_t * bounds, int64_t n_blocks,
               double * out, int64_t ld) {
#if defined(LLAMA_TP_Q8_VNNI)
    tile_vector<RM, RN>(w, x, bounds, n_blocks, out, ld, VnniLaneSums<RN>{});
#else
    tile_avx2<RM, RN>(w, x, bounds, n_blocks, out, ld);
#endif
}

template <int RM, int RN>
void tile_avx512_or_below(const BlockQ8_0 * const * w, const BlockQ8_0 * const * x, const int64_t * bounds,
                          int64_t n_blocks, double * out, int64_t ld) {
#if defined(LLAMA_TP_Q8_AVX512)
    // One token would leave half of every register empty: rows pair up
    // instead, or a lone row takes the 256-bit path.
    if constexpr (RN == 1 && RM == 1) {
        tile_vnni<RM, RN>(w, x, bounds, n_blocks, out, ld);
    } else if constexpr (RN == 1) {
        (void) ld;
        tile_avx512_row_pairs<RM>(w, x[0], bounds, n_blocks, out);
    } else {
        tile_avx512<RM, RN>(w, PairsInline<RN>{x}, bounds, n_blocks, out, ld);
    }
#else
    tile_vnni<RM, RN>(w, x, bounds, n_blocks, out, ld);
#endif
}

// Every tile shape of one kernel, indexed [rows - 1][tokens - 1].
#define LLAMA_TP_TILE_ROW(fn, RM) \
    { fn<RM, 1>, fn<RM, 2>, fn<RM, 3>, fn<RM, 4>, fn<RM, 5>, fn<RM, 6>, fn<RM, 7>, fn<RM, 8> }
#define LLAMA_TP_TILES(fn) \
    { LLAMA_TP_TILE_ROW(fn, 1), LLAMA_TP_TILE_ROW(fn, 2), LLAMA_TP_TILE_ROW(fn, 3), LLAMA_TP_TILE_ROW(fn, 4) }
static_assert(kQ8TileRows == 4 && kQ8TileTokens == 8, "the tables below list shapes up to 4 x 8");

using TileTable = TileFn[kQ8TileRows][kQ8TileTokens];
const TileTable kScalar = LLAMA_TP_TILES(tile_scalar);
const TileTable kAvx2 = LLAMA_TP_TILES(tile_avx2);
const TileTable kVnni = LLAMA_TP_TILES(tile_vnni);
const TileTable kAvx512 = LLAMA_TP_TILES(tile_avx512_or_below);

}  // namespace

std::vector<Q8Kernel> q8_kernels_available() {
    std::vector<Q8Kernel> kernels{Q8Kernel::Scalar};
#if defined(LLAMA_TP_Q8_AVX2)
    if (ggml_cpu_has_avx2() && ggml_cpu_has_fma() && ggml_cpu_has_f16c()) kernels.push_back(Q8Kernel::Avx2);
#endif
#if defined(LLAMA_TP_Q8_VNNI)
    if (ggml_cpu_has_avx512_vnni() || ggml_cpu_has_avx_vnni()) kernels.push_back(Q8Kernel::Vnni);
#endif
#if defined(LLAMA_TP_Q8_AVX512)
    if (ggml_cpu_has_avx512() && ggml_cpu_has_avx512_vnni()) kernels.push_back(Q8Kernel::Avx512);
#endif
    return kernels;
}

Q8Kernel q8_best_kernel() {
    static const Q8Kernel best = q8_kernels_available().back();
    return best;
}

const char * q8_kernel_name(Q8Kernel kernel) {
    switch (kernel) {
        case Q8Kernel::Scalar:
            return "scalar";
        case Q8Kernel::Avx2:
            return "avx2";
        case Q8Kernel::Vnni:
            return "vnni";
        case Q8Kernel::Avx512:
            return "avx512-vnni";
    }
    return "?";
}

void q8_tile(Q8Kernel kernel, const BlockQ8_0 * const * w, int nr, const BlockQ8_0 * const * x, int nc,
             const int64_t * bounds, int64_t n_blocks, double * out, int64_t ld) {
    const TileTable & table = kernel == Q8Kernel::Avx512 ? kAvx512
                              : kernel == Q8Kernel::Vnni ? kVnni
                              : kernel == Q8Kernel::Avx2 ? kAvx2
                                                         : kScalar;
    table[nr - 1][nc - 1](w, x, bounds, n_blocks, out, ld);
}

bool q8_kernel_beats_ggml(Q8Kernel kernel) {
    // AVX-512 VNNI: two tokens per register, against ggml's 256-bit tiles
    // (AMD EPYC: 1.06-1.19x one token to 512, decode and prefill of whole
    // models 1.1-1.25x). The 256-bit paths were not measured faster.
    return kernel == Q8Kernel::Avx512;
}

#if defined(LLAMA_TP_Q8_AVX512)
namespace {
using LayOutFn = void (*)(const BlockQ8_0 * const *, int64_t, uint8_t *);
const LayOutFn kLayOut[kQ8TileTokens] = {lay_out_pairs<1>, lay_out_pairs<2>, lay_out_pairs<3>, lay_out_pairs<4>,
                                         lay_out_pairs<5>, lay_out_pairs<6>, lay_out_pairs<7>, lay_out_pairs<8>};
using LaidOutFn = void (*)(const BlockQ8_0 * const *, const uint8_t *, const int64_t *, int64_t, double *, int64_t);
const LaidOutFn kLaidOut[kQ8TileRows][kQ8TileTokens] = LLAMA_TP_TILES(tile_avx512_laid_out);
}  // namespace
#endif

Q8Tokens::Q8Tokens(Q8Kernel kernel, const BlockQ8_0 * const * x, int nc, int64_t n_blocks) : nc_(nc) {
    std::copy(x, x + nc, x_);
#if defined(LLAMA_TP_Q8_AVX512)
    // One token is read as its blocks are (rows in pairs, or the 256-bit path).
    if (kernel == Q8Kernel::Avx512 && nc > 1) {
        laid_out_.resize((size_t) n_blocks * (size_t) ((nc + 1) / 2) * kPairBytes);
        kLayOut[nc - 1](x, n_blocks, laid_out_.data());
    }
#else
    (void) kernel;
    (void) n_blocks;
#endif
}

void q8_tile(Q8Kernel kernel, const BlockQ8_0 * const * w, int nr, const Q8Tokens & x, const int64_t * bounds,
             int64_t n_blocks, double * out, int64_t ld) {
#if defined(LLAMA_TP_Q8_AVX512)
    if (!x.laid_out_.empty()) {
        kLaidOut[nr - 1][x.nc_ - 1](w, x.laid_out_.data(), bounds, n_blocks, out, ld);
        return;
    }
#endif
    q8_tile(kernel, w, nr, x.x_, x.nc_, bounds, n_blocks, out, ld);
}

int q8_tile_tokens(Q8Kernel kernel) {
    // 256-bit paths have 16 registers (AVX2) for the accumulators: four tokens.
    return kernel == Q8Kernel::Avx512 ? kQ8TileTokens : 4;
}

}  // namespace ggml_ext
