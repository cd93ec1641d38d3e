#include "ggml-ext/ops/row_attention.h"

#include "ggml-ext/ops/op_params.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace {

constexpr ggml_fp16_t kHidden = 0xFC00;  // F16 -inf

// One register of float lanes and the operations the kernel needs of it. A
// block of W cells is scored in one register, so no horizontal sum is paid
// per cell. 256-bit lanes on every x86 CPU with AVX2, AVX-512 ones included.
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
struct Lanes {
    using F = __m256;
    static constexpr int W = 8;
    static F zero() { return _mm256_setzero_ps(); }
    static F set1(float x) { return _mm256_set1_ps(x); }
    static F load(const float * p) { return _mm256_loadu_ps(p); }
    static F load(const ggml_fp16_t * p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    }
    static void store(float * p, F x) { _mm256_storeu_ps(p, x); }
    static F add(F a, F b) { return _mm256_add_ps(a, b); }
    static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
    static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    static F max(F a, F b) { return _mm256_max_ps(a, b); }
    static F round(F x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static F pow2(F n) {
        const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
        return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
    }
    static uint32_t visible(F mask) {
        return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(mask, set1(-INFINITY), _CMP_NEQ_OQ)));
    }
    static F hide(F x, F mask, float other) {
        return _mm256_blendv_ps(x, set1(other), _mm256_cmp_ps(mask, set1(-INFINITY), _CMP_EQ_OQ));
    }
    static float hmax(F x) {
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    }
    static float hsum(F x) {
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
    }
    static F sums(F (&a)[W]) {
        const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
        const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
        return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
    }
};
#else
struct Lanes {
    using F = float;
    static constexpr int W = 1;
    static F zero() { return 0.0f; }
    static F set1(float x) { return x; }
    static F load(const float * p) { return *p; }
    static F load(const ggml_fp16_t * p) { return ggml_fp16_to_fp32(*p); }
    static void store(float * p, F x) { *p = x; }
    static F add(F a, F b) { return a + b; }
    static F sub(F a, F b) { return a - b; }
    static F mul(F a, F b) { return a * b; }
    static F fma(F a, F b, F c) { return std::fma(a, b, c); }
    static F max(F a, F b) { return std::max(a, b); }
    static uint32_t visible(F mask) { return mask != -INFINITY ? 1u : 0u; }
    static F hide(F x, F mask, float other) { return mask == -INFINITY ? other : x; }
    static float hmax(F x) { return x; }
    static float hsum(F x) { return x; }
    static F sums(F (&a)[W]) { return a[0]; }
};
#endif

using F = Lanes::F;
constexpr int64_t W = Lanes::W;

// e^x for x <= 0, lane by lane: Cephes' single-precision polynomial after
// reducing by ln 2 (a few ulp); below -87 it is e^-87, about 1e-38.
F exp_nonpositive(F x) {
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
    using L = Lanes;
    x = L::max(x, L::set1(-87.0f));
    const F n = L::round(L::mul(x, L::set1(1.44269504088896341f)));
    F r = L::fma(n, L::set1(-0.693359375f), x);
    r = L::fma(n, L::set1(2.12194440e-4f), r);
    F p = L::set1(1.9875691500e-4f);
    p = L::fma(p, r, L::set1(1.3981999507e-3f));
    p = L::fma(p, r, L::set1(8.3334519073e-3f));
    p = L::fma(p, r, L::set1(4.1665795894e-2f));
    p = L::fma(p, r, L::set1(1.6666665459e-1f));
    p = L::fma(p, r, L::set1(5.0000001201e-1f));
    p = L::fma(p, L::mul(r, r), L::add(r, L::set1(1.0f)));
    return L::mul(p, L::pow2(n));
#else
    return std::exp(x);
#endif
}

template <typename T>
const T * at(const ggml_tensor * t, int64_t i1, int64_t i2, int64_t i3) {
    return reinterpret_cast<const T *>(static_cast<const char *>(t->data) + i1 * t->nb[1] + i2 * t->nb[2] +
                                       i3 * t->nb[3]);
}

inline float to_float(float x) {
    return x;
}
inline float to_float(ggml_fp16_t x) {
    return ggml_fp16_to_fp32(x);
}

// The mask of cells c0 .. c0 + W - 1 of one row; cells past n_kv are hidden.
F mask_lanes(const ggml_fp16_t * row, int64_t c0, int64_t n_kv) {
    if (c0 + W <= n_kv) return Lanes::load(row + c0);
    ggml_fp16_t padded[W];
    for (int64_t j = 0; j < W; ++j) padded[j] = c0 + j < n_kv ? row[c0 + j] : kHidden;
    return Lanes::load(padded);
}

// The scores of W cells for one query: lane j is q . keys[j], each summed
// the same way (W-wide partial sums, then the lanes, then a scalar tail).
template <typename T>
F block_scores(const float * q, const T * const * keys, int64_t D) {
    F acc[W];
    for (int64_t j = 0; j < W; ++j) acc[j] = Lanes::zero();
    int64_t d = 0;
    for (; d + W <= D; d += W) {
        const F qd = Lanes::load(q + d);
        for (int64_t j = 0; j < W; ++j) acc[j] = Lanes::fma(qd, Lanes::load(keys[j] + d), acc[j]);
    }
    F s = Lanes::sums(acc);
    if (d == D) return s;
    float lanes[W], tail[W];
    Lanes::store(lanes, s);
    for (int64_t j = 0; j < W; ++j) {
        float t = 0.0f;
        for (int64_t i = d; i < D; ++i) t += q[i] * to_float(keys[j][i]);
        tail[j] = lanes[j] + t;
    }
    return Lanes::load(tail);
}

// out[i] += sum over the visible cells j, in order, of p[j] * values[j][i];
// N registers of out at a time stay in registers across the cells.
template <int N, typename T>
int64_t add_values(float * out, const float * p, uint32_t visible, const T * const * values, int64_t d, int64_t D) {
    for (; d + N * W <= D; d += N * W) {
        F acc[N];
        for (int i = 0; i < N; ++i) acc[i] = Lanes::load(out + d + i * W);
        for (uint32_t bits = visible; bits != 0; bits &= bits - 1) {
            const int j = __builtin_ctz(bits);
            const F pj = Lanes::set1(p[j]);
            for (int i = 0; i < N; ++i) acc[i] = Lanes::fma(pj, Lanes::load(values[j] + d + i * W), acc[i]);
        }
        for (int i = 0; i < N; ++i) Lanes::store(out + d + i * W, acc[i]);
    }
    return d;
}

template <typename T>
void add_block_values(float * out, const float * p, uint32_t visible, const T * const * values, int64_t D) {
    int64_t d = add_values<8>(out, p, visible, values, 0, D);
    d = add_values<4>(out, p, visible, values, d, D);
    d = add_values<1>(out, p, visible, values, d, D);
    for (; d < D; ++d) {
        for (uint32_t bits = visible; bits != 0; bits &= bits - 1) {
            const int j = __builtin_ctz(bits);
            out[d] = std::fma(p[j], to_float(values[j][d]), out[d]);
        }
    }
}

// An item's rows (query tokens times the heads of one KV head) share every
// key and value conversion: up to kRows of them, at most kTokens tokens.
constexpr int64_t kTokens = 32;
constexpr int64_t kMaxGroup = 16;
constexpr int64_t kRows = 64;

// A row's cells are taken in chunks of this many, each with its own
// maximum, and the chunks' partial results are combined in cell order: the
// same arithmetic whoever computes a chunk, so that a decoded row's chunks
// can go to different threads. A decode token's item then holds every head
// and its threads share the cells, each reading whole cell rows (every KV
// head, adjacent in the cache) in memory order instead of a part of every
// row. (At 30000 cells, AMD EPYC, 2 threads: 2.4-3.0 ms against 3.5-3.7 ms
// with half the heads per thread; 4096 cells: 0.34-0.37 against 0.40-0.45.)
// A chunk's passes start without prefetched cells: 2048 cells make that
// cost nothing measurable (256 cost 5% of decoding at depth 4000), and a
// row within one chunk computes exactly as without chunks.
constexpr int64_t kChunkCells = 2048;
static_assert(kChunkCells % Lanes::W == 0, "chunks of whole blocks");
// Graphs with at most this many query rows per head (decoding) keep a
// partial result per chunk, so that chunks may be split between threads.
constexpr int64_t kSplitTokens = 16;
constexpr int64_t kMaxPartBytes = int64_t(64) << 20;

int64_t tokens_per_item(int64_t heads) {
    return std::max<int64_t>(1, std::min(kTokens, kRows / heads));
}

struct Scratch {
    int64_t stride;  // scores per row: a chunk's cells rounded up to whole blocks
    std::vector<float> q, scores, out, kf, vf;
    std::vector<ggml_fp16_t> zero;  // the rows of cells past n_kv
    Scratch(int64_t D, int64_t n_kv, int64_t rows)
        : stride((std::min(n_kv, kChunkCells) + W - 1) / W * W),
          q(rows * D),
          scores(rows * stride),
          out(rows * D),
          kf(W * D),
          vf(W * D),
          zero(D, 0) {}
};

// One work item: query tokens t0 .. t0 + nt - 1 of the query heads
// h0 .. h0 + nh - 1, which read one KV head, in stream s.
struct Item {
    int64_t t0, nt, h0, nh, s;
};

// The rows of block c0 of a K or V head: read in place as F16 when one row
// reads them, else converted once to F32 for all rows (the same values, so
// the same results).
struct BlockRows {
    const ggml_fp16_t * f16[W];
    const float * f32[W];
    bool converted;
};

// Cells this far ahead are fetched while a block is read: one KV head's
// cells lie a whole cell (every KV head) apart, a stride the hardware
// prefetchers do not follow far enough. (128 cells ahead measured best of
// 0 to 512 in decoding at depth.)
constexpr int64_t kPrefetchCells = 128;

BlockRows block_rows(const ggml_tensor * t, int64_t c0, int64_t n_kv, int64_t hk, int64_t s, bool convert,
                     float * scratch, const ggml_fp16_t * zero) {
    const int64_t D = t->ne[0];
    for (int64_t j = c0 + kPrefetchCells; j < std::min(n_kv, c0 + kPrefetchCells + W); ++j) {
        const char * p = reinterpret_cast<const char *>(at<ggml_fp16_t>(t, j, hk, s));
        for (int64_t off = 0; off < D * (int64_t) sizeof(ggml_fp16_t); off += 64) __builtin_prefetch(p + off);
    }
    BlockRows b{};
    b.converted = convert;
    for (int64_t j = 0; j < W; ++j) {
        b.f16[j] = c0 + j < n_kv ? at<ggml_fp16_t>(t, c0 + j, hk, s) : zero;
        if (!convert) continue;
        float * y = scratch + j * D;
        int64_t i = 0;
        for (; i + W <= D; i += W) Lanes::store(y + i, Lanes::load(b.f16[j] + i));
        for (; i < D; ++i) y[i] = ggml_fp16_to_fp32(b.f16[j][i]);
        b.f32[j] = y;
    }
    return b;
}

// A row's result over some of its cells, as the partials tensor holds it:
// [max, sum, out[D]]: the largest score (-inf: no cell seen), the sum of
// exp(score - max) and the values weighted by those.
constexpr int64_t kPartHead = 2;

// Adds part (m, s, o) to the running result (M, S, O), in cell order. Every
// path (one thread over all chunks, or chunks on several threads combined
// afterwards) adds the same parts in the same order through this function.
void combine(float * run, const float * part, int64_t D) {
    const float m = part[0];
    if (m == -INFINITY) return;  // no visible cell there
    if (run[0] == -INFINITY) {
        std::memcpy(run, part, (size_t) (kPartHead + D) * sizeof(float));
        return;
    }
    const float M = std::max(run[0], m);
    const float a = std::exp(run[0] - M), b = std::exp(m - M);
    run[0] = M;
    run[1] = std::fma(part[1], b, run[1] * a);
    for (int64_t i = 0; i < D; ++i) run[kPartHead + i] = std::fma(part[kPartHead + i], b, run[kPartHead + i] * a);
}

// The item's rows (token, head) over the cells of chunk ch: scores of the
// visible cells, their maximum, the exponentials and the weighted sum of
// their values, in F32, block of W cells by block, written to part(r) per
// row r. Every row's arithmetic depends only on its own query, mask and
// cells, never on the rows it shares the item with. An item's heads read one
// KV head, or several whole ones (one token: their cells are read side by
// side).
template <typename PartOf>
void attend_chunk(const ggml_tensor * op, const Item & it, int64_t ch, float softcap, Scratch & w, PartOf && part) {
    const ggml_tensor * tk = op->src[1];
    const ggml_tensor * tv = op->src[2];
    const ggml_tensor * tm = op->src[3];
    const int64_t D = tk->ne[0], n_kv = tk->ne[1], s = it.s;
    const int64_t group = op->src[0]->ne[2] / tk->ne[2];
    const int64_t nr = it.nt * it.nh;  // row r: token it.t0 + r / nh, head it.h0 + r % nh
    // The item's KV heads kv0 .. kv0 + n_kvh - 1, each read by per_kv of its heads.
    const int64_t kv0 = it.h0 / group, n_kvh = std::max<int64_t>(1, it.nh / group), per_kv = it.nh / n_kvh;
    const bool convert = it.nt * per_kv > 1;
    const int64_t cb = ch * kChunkCells, ce = std::min(n_kv, cb + kChunkCells);

    const ggml_fp16_t * token_mask[kTokens];
    for (int64_t t = 0; t < it.nt; ++t) token_mask[t] = at<ggml_fp16_t>(tm, it.t0 + t, 0, s);
    F max_lanes[kRows];
    for (int64_t r = 0; r < nr; ++r) max_lanes[r] = Lanes::set1(-INFINITY);

    F mask[kTokens];
    uint32_t visible[kTokens];
    auto block_mask = [&](int64_t c0) {
        uint32_t any = 0;
        for (int64_t t = 0; t < it.nt; ++t) {
            mask[t] = mask_lanes(token_mask[t], c0, n_kv);
            visible[t] = Lanes::visible(mask[t]);
            any |= visible[t];
        }
        return any != 0;
    };
    // Calls fn(r, t) for the rows of KV head q whose token sees a cell of the block.
    auto rows_of = [&](int64_t q, auto && fn) {
        for (int64_t t = 0; t < it.nt; ++t) {
            if (visible[t] == 0) continue;
            for (int64_t i = 0; i < per_kv; ++i) fn(t * it.nh + q * per_kv + i, t);
        }
    };

    for (int64_t c0 = cb; c0 < ce; c0 += W) {
        if (!block_mask(c0)) continue;
        for (int64_t q = 0; q < n_kvh; ++q) {
            const BlockRows keys = block_rows(tk, c0, n_kv, kv0 + q, s, convert, w.kf.data(), w.zero.data());
            rows_of(q, [&](int64_t r, int64_t t) {
                const float * qv = w.q.data() + r * D;
                F score = keys.converted ? block_scores(qv, keys.f32, D) : block_scores(qv, keys.f16, D);
                if (softcap != 0.0f) {
                    float lanes[W];
                    Lanes::store(lanes, score);
                    for (float & x : lanes) x = softcap * std::tanh(x);
                    score = Lanes::load(lanes);
                }
                score = Lanes::hide(Lanes::add(score, mask[t]), mask[t], -INFINITY);
                Lanes::store(w.scores.data() + r * w.stride + (c0 - cb), score);
                max_lanes[r] = Lanes::max(max_lanes[r], score);
            });
        }
    }

    float max[kRows];
    F sum_lanes[kRows];
    for (int64_t r = 0; r < nr; ++r) {
        max[r] = Lanes::hmax(max_lanes[r]);
        sum_lanes[r] = Lanes::zero();
    }
    std::fill(w.out.begin(), w.out.begin() + nr * D, 0.0f);
    for (int64_t c0 = cb; c0 < ce; c0 += W) {
        if (!block_mask(c0)) continue;
        for (int64_t q = 0; q < n_kvh; ++q) {
            const BlockRows values = block_rows(tv, c0, n_kv, kv0 + q, s, convert, w.vf.data(), w.zero.data());
            rows_of(q, [&](int64_t r, int64_t t) {
                const F x = Lanes::sub(Lanes::load(w.scores.data() + r * w.stride + (c0 - cb)), Lanes::set1(max[r]));
                const F p = Lanes::hide(exp_nonpositive(x), mask[t], 0.0f);
                sum_lanes[r] = Lanes::add(sum_lanes[r], p);
                float pl[W];
                Lanes::store(pl, p);
                float * out = w.out.data() + r * D;
                if (values.converted) {
                    add_block_values(out, pl, visible[t], values.f32, D);
                } else {
                    add_block_values(out, pl, visible[t], values.f16, D);
                }
            });
        }
    }

    for (int64_t r = 0; r < nr; ++r) {
        float * y = part(r);
        y[0] = max[r];
        y[1] = Lanes::hsum(sum_lanes[r]);
        std::memcpy(y + kPartHead, w.out.data() + r * D, (size_t) D * sizeof(float));
    }
}

// The item's queries, scaled (a soft-cap divides the scaled score: folded in).
void load_queries(const ggml_tensor * op, const Item & it, float scale, float softcap, Scratch & w) {
    const ggml_tensor * tq = op->src[0];
    const int64_t D = tq->ne[0];
    const float q_scale = softcap != 0.0f ? scale / softcap : scale;
    for (int64_t r = 0; r < it.nt * it.nh; ++r) {
        const float * qr = at<float>(tq, it.t0 + r / it.nh, it.h0 + r % it.nh, it.s);
        for (int64_t i = 0; i < D; ++i) w.q[r * D + i] = qr[i] * q_scale;
    }
}

// Query heads per work item. With several query tokens: the whole group of
// heads that read one KV head (so a key and a value are converted once for
// all of them), halved while that leaves threads without an item. With one
// token per stream (decoding): as many whole groups as still give every
// thread a unit of work (an item, or a chunk of one where chunks go to
// different threads: n_chunks, else 1), so that a thread reads the cells
// of neighbouring KV heads, adjacent in the cache, together; where chunks
// may be split between threads, never less than a whole group (splitting a
// group would make each thread read all of its KV head's cells).
int64_t heads_per_item(int64_t T, int64_t n_head, int64_t group, int64_t n_streams, int nth, int64_t n_chunks) {
    const bool chunks_split = n_chunks > 1;
    if (T == 1) {
        int64_t heads = 0;
        for (int64_t h = group; h <= std::min(n_head, kRows); h += group) {
            if (n_head % h == 0 && n_head / h * n_streams * n_chunks >= nth) heads = h;
        }
        if (heads > 0) return heads;
        if (chunks_split && group <= kRows) return group;
    }
    const int64_t most = std::min(group, kMaxGroup);
    const int64_t items_per_head_group =
        (T + tokens_per_item(most) - 1) / tokens_per_item(most) * (n_head / group) * n_streams;
    int64_t heads = most;
    while (group % heads != 0) --heads;
    if (chunks_split) return heads;
    while (heads > 1 && heads % 2 == 0 && items_per_head_group * (group / heads) < nth) heads /= 2;
    return heads;
}

// How one call's work is cut: items of (token block, heads, stream), and
// whether each item's chunks go to different threads (one partial result
// per chunk) or one thread takes them all (one partial per row).
struct Plan {
    int64_t heads, tokens, n_blocks, n_head_items, n_streams, n_chunks;
    bool split;
    int64_t items() const { return n_blocks * n_head_items * n_streams; }
    Item item(int64_t i, int64_t T) const {
        const int64_t b = i % n_blocks, hi = (i / n_blocks) % n_head_items, s = i / (n_blocks * n_head_items);
        const int64_t t0 = b * tokens;
        return Item{t0, std::min(tokens, T - t0), hi * heads, heads, s};
    }
};

// slots: partial results the partials tensor holds per row (1, or one per chunk).
Plan plan_of(const ggml_tensor * q, const ggml_tensor * k, int64_t slots, int nth) {
    const int64_t T = q->ne[1], n_head = q->ne[2], n_streams = q->ne[3];
    const int64_t group = n_head / k->ne[2];
    Plan p{};
    p.n_chunks = (k->ne[1] + kChunkCells - 1) / kChunkCells;
    const bool may_split = slots > 1 && slots == p.n_chunks;
    p.heads = heads_per_item(T, n_head, group, n_streams, nth, may_split ? p.n_chunks : 1);
    p.tokens = tokens_per_item(p.heads);
    p.n_blocks = (T + p.tokens - 1) / p.tokens;
    p.n_head_items = n_head / p.heads;
    p.n_streams = n_streams;
    p.split = may_split && p.items() < nth;
    return p;
}

// The partials of row (token t of T, head h, stream s), slot j: [max, sum, out[D]].
float * part_at(const ggml_tensor * parts, int64_t T, int64_t t, int64_t h, int64_t s, int64_t j) {
    return reinterpret_cast<float *>(static_cast<char *>(parts->data) + j * parts->nb[1] + h * parts->nb[2] +
                                     (s * T + t) * parts->nb[3]);
}

// How the partials' scores are made (ggml-ext/ops/op_params.h).
struct Scores {
    float scale, softcap;
};
constexpr const char * kScoresName = "row_attention_scores";

// The partial results: work units (an item, or one chunk of an item when
// chunks are split) are dealt to the threads in turn. Unsplit, a thread
// combines an item's chunks itself and keeps one partial per row.
void run_parts(ggml_tensor * dst, int ith, int nth, void *) {
    Scores params{};
    ggml_ext::op_params_of(dst, kScoresName, &params);
    const float scale = params.scale, softcap = params.softcap;
    const ggml_tensor * tq = dst->src[0];
    const int64_t D = tq->ne[0], T = tq->ne[1];
    const Plan p = plan_of(tq, dst->src[1], dst->ne[1], nth);
    const int64_t rows = std::min(p.tokens, T) * p.heads, width = kPartHead + D;
    Scratch w(D, dst->src[1]->ne[1], rows);
    std::vector<float> chunk(rows * width), run(rows * width);
    const int64_t per_item = p.split ? p.n_chunks : 1;
    for (int64_t unit = ith; unit < p.items() * per_item; unit += nth) {
        const Item it = p.item(unit / per_item, T);
        auto row_part = [&](int64_t r, int64_t j) {
            return part_at(dst, T, it.t0 + r / it.nh, it.h0 + r % it.nh, it.s, j);
        };
        load_queries(dst, it, scale, softcap, w);
        if (p.split) {
            const int64_t ch = unit % per_item;
            attend_chunk(dst, it, ch, softcap, w, [&](int64_t r) { return row_part(r, ch); });
            continue;
        }
        const int64_t nr = it.nt * it.nh;
        for (int64_t r = 0; r < nr; ++r) {
            std::fill(run.begin() + r * width, run.begin() + (r + 1) * width, 0.0f);
            run[r * width] = -INFINITY;
        }
        for (int64_t ch = 0; ch < p.n_chunks; ++ch) {
            attend_chunk(dst, it, ch, softcap, w, [&](int64_t r) { return chunk.data() + r * width; });
            for (int64_t r = 0; r < nr; ++r) combine(run.data() + r * width, chunk.data() + r * width, D);
        }
        for (int64_t r = 0; r < nr; ++r) {
            std::memcpy(row_part(r, 0), run.data() + r * width, (size_t) width * sizeof(float));
        }
    }
}

// Each row's partials combined in chunk order, its sink added, and the
// weighted values divided by the sum: the row's output.
void run_rows(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor * parts = dst->src[0];
    const float * sinks = dst->src[3] ? static_cast<const float *>(dst->src[3]->data) : nullptr;
    const int64_t D = dst->ne[0], n_head = dst->ne[1], T = dst->ne[2], n_streams = dst->ne[3];
    const Plan p = plan_of(dst->src[1], dst->src[2], parts->ne[1], nth);
    const int64_t used = p.split ? p.n_chunks : 1, width = kPartHead + D;
    std::vector<float> run(width);
    for (int64_t row = ith; row < n_head * T * n_streams; row += nth) {
        const int64_t h = row % n_head, t = (row / n_head) % T, s = row / (n_head * T);
        std::fill(run.begin(), run.end(), 0.0f);
        run[0] = -INFINITY;
        for (int64_t j = 0; j < used; ++j) combine(run.data(), part_at(parts, T, t, h, s, j), D);
        float sum = run[1], factor = 1.0f;
        // A sink takes part in the maximum and adds its share to the sum.
        if (sinks) {
            const float m = std::max(run[0], sinks[h]);
            factor = run[0] == -INFINITY ? 0.0f : std::exp(run[0] - m);
            sum = std::fma(sum, factor, std::exp(sinks[h] - m));
        }
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        float * y = reinterpret_cast<float *>(static_cast<char *>(dst->data) + h * dst->nb[1] + t * dst->nb[2] +
                                              s * dst->nb[3]);
        if (sinks) {
            for (int64_t i = 0; i < D; ++i) y[i] = run[kPartHead + i] * factor * inv;
        } else {
            for (int64_t i = 0; i < D; ++i) y[i] = run[kPartHead + i] * inv;
        }
    }
}

}  // namespace

extern "C" {

ggml_tensor * ggml_ext_row_attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v,
                                     ggml_tensor * mask, ggml_tensor * sinks, float scale, float softcap) {
    GGML_ASSERT(q->type == GGML_TYPE_F32 && k->type == GGML_TYPE_F16 && v->type == GGML_TYPE_F16);
    GGML_ASSERT(mask->type == GGML_TYPE_F16);
    GGML_ASSERT(q->nb[0] == sizeof(float) && mask->ne[1] >= q->ne[1]);
    GGML_ASSERT(k->ne[0] == q->ne[0] && v->ne[0] == q->ne[0] && k->ne[1] == v->ne[1]);
    GGML_ASSERT(k->ne[2] == v->ne[2] && q->ne[2] % k->ne[2] == 0);
    GGML_ASSERT(k->ne[3] == q->ne[3] && v->ne[3] == q->ne[3] && mask->ne[3] == q->ne[3]);
    GGML_ASSERT(mask->ne[0] >= k->ne[1]);
    GGML_ASSERT(k->nb[0] == sizeof(ggml_fp16_t) && v->nb[0] == sizeof(ggml_fp16_t));
    GGML_ASSERT(!sinks || (sinks->type == GGML_TYPE_F32 && ggml_is_contiguous(sinks) && sinks->ne[0] == q->ne[2]));
    const int64_t D = q->ne[0], T = q->ne[1], n_head = q->ne[2], n_streams = q->ne[3];
    // A partial result per chunk where few rows are decoded (and the
    // partials stay small), so that the threads can share a row's chunks.
    const int64_t n_chunks = (k->ne[1] + kChunkCells - 1) / kChunkCells;
    const int64_t part_bytes = n_chunks * (kPartHead + D) * n_head * T * n_streams * (int64_t) sizeof(float);
    const int64_t slots = n_chunks > 1 && T <= kSplitTokens && part_bytes <= kMaxPartBytes ? n_chunks : 1;
    ggml_tensor * part_args[5] = {q, k, v, mask, ggml_ext::op_params_tensor(ctx, kScoresName, Scores{scale, softcap})};
    ggml_tensor * parts = ggml_custom_4d(ctx, GGML_TYPE_F32, kPartHead + D, slots, n_head, T * n_streams, part_args, 5,
                                         run_parts, GGML_N_TASKS_MAX, nullptr);
    ggml_set_name(parts, "row_attention_parts");
    ggml_tensor * row_args[4] = {parts, q, k, sinks};
    ggml_tensor * out = ggml_custom_4d(ctx, GGML_TYPE_F32, D, n_head, T, n_streams, row_args, sinks ? 4 : 3, run_rows,
                                       GGML_N_TASKS_MAX, nullptr);
    ggml_set_name(out, "row_attention");
    return out;
}
}
