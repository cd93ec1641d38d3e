#include "ggml-ext/row_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__F16C__) && defined(__FMA__))
#include <immintrin.h>
#endif

// GCC 12's AVX-512 intrinsics pass an undefined register as the unused
// merge source and then warn about it where they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace {

#if defined(__AVX512F__)
__m512 load_f16x16(const ggml_fp16_t * p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
}

float sum_f32x16(__m512 v) {
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));  // + the other 256 bits
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));  // + the neighbouring 128 bits
    __m128 h = _mm512_castps512_ps128(v);
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
#endif

// F16 -> F32, n elements (exact).
void to_f32(const ggml_fp16_t * x, float * y, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, load_f16x16(x + i));
#elif defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i))));
    }
#endif
    for (; i < n; ++i) y[i] = ggml_fp16_to_fp32(x[i]);
}

// sum_i a[i] * b[i]
float dot(const float * a, const float * b, int64_t n) {
    int64_t i = 0;
    float s = 0.0f;
#if defined(__AVX512F__)
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    s = sum_f32x16(acc);
#elif defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    s = _mm_cvtss_f32(h);
#endif
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

// out[i] += p * v[i]
void axpy(float * out, float p, const float * v, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    const __m512 pv = _mm512_set1_ps(p);
    for (; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(out + i, _mm512_fmadd_ps(pv, _mm512_loadu_ps(v + i), _mm512_loadu_ps(out + i)));
    }
#elif defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
    const __m256 pv = _mm256_set1_ps(p);
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(out + i)));
    }
#endif
    for (; i < n; ++i) out[i] += p * v[i];
}

template <typename T>
const T * at(const ggml_tensor * t, int64_t i1, int64_t i2, int64_t i3) {
    return reinterpret_cast<const T *>(static_cast<const char *>(t->data) + i1 * t->nb[1] + i2 * t->nb[2] +
                                       i3 * t->nb[3]);
}

constexpr ggml_fp16_t kHidden = 0xFC00;  // F16 -inf

// Whether any of the token rows' masks sees cell c (a cell no row sees is not loaded).
bool any_row_sees(const ggml_fp16_t * const * mask, int64_t n_tokens, int64_t c) {
    bool any = false;
    for (int64_t t = 0; t < n_tokens; ++t) any |= mask[t][c] != kHidden;
    return any;
}
constexpr int64_t kTokens = 4;     // query tokens sharing each key and value load
constexpr int64_t kMaxGroup = 16;  // query heads of one KV head sharing them too
constexpr int64_t kRows = kTokens * kMaxGroup;

struct Scratch {
    std::vector<float> q, scores, out, kf, vf;
    Scratch(int64_t D, int64_t n_kv, int64_t rows) : q(rows * D), scores(rows * n_kv), out(rows * D), kf(D), vf(D) {}
};

// One work item: query tokens t0 .. t0 + nt - 1 of the query heads
// h0 .. h0 + nh - 1, which read one KV head, in stream s.
struct Item {
    int64_t t0, nt, h0, nh, s;
};

// The item's rows (token, head): scores of the visible cells, softmax and
// the weighted sum of their values, in F32. The rows share each key and
// value conversion; every row's arithmetic is the same as if it were alone
// (the same operations on the same numbers, in the same order).
void attend_rows(const ggml_tensor * dst, const Item & it, float scale, float softcap, Scratch & w) {
    const ggml_tensor * tq = dst->src[0];
    const ggml_tensor * tk = dst->src[1];
    const ggml_tensor * tv = dst->src[2];
    const ggml_tensor * tm = dst->src[3];
    const float * sinks = dst->src[4] ? static_cast<const float *>(dst->src[4]->data) : nullptr;
    const int64_t D = tq->ne[0], n_kv = tk->ne[1], s = it.s;
    const int64_t hk = it.h0 / (tq->ne[2] / tk->ne[2]);
    const int64_t nr = it.nt * it.nh;  // row r: token it.t0 + r / nh, head it.h0 + r % nh

    const ggml_fp16_t * token_mask[kTokens];
    for (int64_t t = 0; t < it.nt; ++t) token_mask[t] = at<ggml_fp16_t>(tm, it.t0 + t, 0, s);
    const ggml_fp16_t * mask[kRows];
    float max[kRows], sum[kRows];
    for (int64_t r = 0; r < nr; ++r) {
        const float * qr = at<float>(tq, it.t0 + r / it.nh, it.h0 + r % it.nh, s);
        // A soft-cap divides the scaled score: folded into the query's scale.
        const float q_scale = softcap != 0.0f ? scale / softcap : scale;
        for (int64_t i = 0; i < D; ++i) w.q[r * D + i] = qr[i] * q_scale;
        mask[r] = token_mask[r / it.nh];
        // A sink takes part in the maximum and adds its share to the sum.
        max[r] = sinks ? sinks[it.h0 + r % it.nh] : -INFINITY;
        sum[r] = 0.0f;
    }

    for (int64_t c = 0; c < n_kv; ++c) {
        if (!any_row_sees(token_mask, it.nt, c)) continue;
        to_f32(at<ggml_fp16_t>(tk, c, hk, s), w.kf.data(), D);
        for (int64_t r = 0; r < nr; ++r) {
            float & score = w.scores[r * n_kv + c];
            if (mask[r][c] == kHidden) {
                score = -INFINITY;
                continue;
            }
            score = dot(w.q.data() + r * D, w.kf.data(), D);
            if (softcap != 0.0f) score = softcap * std::tanh(score);
            score += ggml_fp16_to_fp32(mask[r][c]);
            if (score > max[r]) max[r] = score;
        }
    }

    std::memset(w.out.data(), 0, nr * D * sizeof(float));
    for (int64_t c = 0; c < n_kv; ++c) {
        if (!any_row_sees(token_mask, it.nt, c)) continue;
        to_f32(at<ggml_fp16_t>(tv, c, hk, s), w.vf.data(), D);
        for (int64_t r = 0; r < nr; ++r) {
            if (mask[r][c] == kHidden) continue;
            const float p = std::exp(w.scores[r * n_kv + c] - max[r]);
            sum[r] += p;
            axpy(w.out.data() + r * D, p, w.vf.data(), D);
        }
    }

    for (int64_t r = 0; r < nr; ++r) {
        if (sinks) sum[r] += std::exp(sinks[it.h0 + r % it.nh] - max[r]);
        const float inv = sum[r] > 0.0f ? 1.0f / sum[r] : 0.0f;
        const int64_t t = it.t0 + r / it.nh, h = it.h0 + r % it.nh;
        float * y = reinterpret_cast<float *>(static_cast<char *>(dst->data) + h * dst->nb[1] + t * dst->nb[2] +
                                              s * dst->nb[3]);
        for (int64_t i = 0; i < D; ++i) y[i] = w.out[r * D + i] * inv;
    }
}

// Query heads per work item: the whole group of heads that read one KV head
// (so a key and a value are converted once for all of them), halved while
// that leaves threads without an item.
int64_t heads_per_item(int64_t group, int64_t items_per_head_group, int nth) {
    int64_t heads = std::min(group, kMaxGroup);
    while (group % heads != 0) --heads;
    while (heads > 1 && heads % 2 == 0 && items_per_head_group * (group / heads) < nth) heads /= 2;
    return heads;
}

// Work items (block of query tokens, heads of one KV head, stream) are dealt
// to the threads in turn.
void run(ggml_tensor * dst, int ith, int nth, void * userdata) {
    float params[2];  // scale, softcap
    std::memcpy(params, &userdata, sizeof(params));
    const float scale = params[0], softcap = params[1];
    const ggml_tensor * tq = dst->src[0];
    const int64_t D = tq->ne[0], T = tq->ne[1], n_head = tq->ne[2], n_streams = tq->ne[3];
    const int64_t n_head_kv = dst->src[1]->ne[2], group = n_head / n_head_kv;
    const int64_t n_blocks = (T + kTokens - 1) / kTokens;
    const int64_t heads = heads_per_item(group, n_blocks * n_head_kv * n_streams, nth);
    const int64_t n_head_items = n_head / heads;
    Scratch w(D, dst->src[1]->ne[1], std::min(kTokens, T) * heads);
    for (int64_t item = ith; item < n_blocks * n_head_items * n_streams; item += nth) {
        const int64_t b = item % n_blocks, hi = (item / n_blocks) % n_head_items, s = item / (n_blocks * n_head_items);
        const int64_t t0 = b * kTokens;
        attend_rows(dst, Item{t0, std::min(kTokens, T - t0), hi * heads, heads, s}, scale, softcap, w);
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
    // The scale and soft-cap travel in the user pointer's bits: nothing to keep alive.
    static_assert(2 * sizeof(float) <= sizeof(void *), "two floats must fit a pointer");
    const float params[2] = {scale, softcap};
    void * userdata = nullptr;
    std::memcpy(&userdata, params, sizeof(params));
    ggml_tensor * args[5] = {q, k, v, mask, sinks};
    ggml_tensor * out = ggml_custom_4d(ctx, GGML_TYPE_F32, q->ne[0], q->ne[2], q->ne[1], q->ne[3], args, sinks ? 5 : 4,
                                       run, GGML_N_TASKS_MAX, userdata);
    ggml_set_name(out, "row_attention");
    return out;
}
}
