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

// Whether any of the nr rows sees cell c (a cell no row sees is not loaded).
bool any_row_sees(const ggml_fp16_t * const * mask, int64_t nr, int64_t c) {
    bool any = false;
    for (int64_t r = 0; r < nr; ++r) any |= mask[r][c] != kHidden;
    return any;
}
constexpr int64_t kBlock = 4;  // query rows sharing each key and value load

struct Scratch {
    std::vector<float> q, scores, out, kf, vf;
    Scratch(int64_t D, int64_t n_kv) : q(kBlock * D), scores(kBlock * n_kv), out(kBlock * D), kf(D), vf(D) {}
};

// Query rows t0 .. t0 + nr - 1 of head h, stream s: scores of the visible
// cells, softmax and the weighted sum of their values, in F32. The rows share
// each key and value conversion; every row's arithmetic is the same as if it
// were alone (the same operations on the same numbers, in the same order).
void attend_rows(const ggml_tensor * dst, int64_t t0, int64_t nr, int64_t h, int64_t s, float scale, Scratch & w) {
    const ggml_tensor * tq = dst->src[0];
    const ggml_tensor * tk = dst->src[1];
    const ggml_tensor * tv = dst->src[2];
    const ggml_tensor * tm = dst->src[3];
    const int64_t D = tq->ne[0], n_kv = tk->ne[1];
    const int64_t hk = h / (tq->ne[2] / tk->ne[2]);

    const ggml_fp16_t * mask[kBlock];
    float max[kBlock], sum[kBlock];
    for (int64_t r = 0; r < nr; ++r) {
        const float * qr = at<float>(tq, t0 + r, h, s);
        for (int64_t i = 0; i < D; ++i) w.q[r * D + i] = qr[i] * scale;
        mask[r] = at<ggml_fp16_t>(tm, t0 + r, 0, s);
        max[r] = -INFINITY;
        sum[r] = 0.0f;
    }

    for (int64_t c = 0; c < n_kv; ++c) {
        if (!any_row_sees(mask, nr, c)) continue;
        to_f32(at<ggml_fp16_t>(tk, c, hk, s), w.kf.data(), D);
        for (int64_t r = 0; r < nr; ++r) {
            float & score = w.scores[r * n_kv + c];
            if (mask[r][c] == kHidden) {
                score = -INFINITY;
                continue;
            }
            score = dot(w.q.data() + r * D, w.kf.data(), D) + ggml_fp16_to_fp32(mask[r][c]);
            if (score > max[r]) max[r] = score;
        }
    }

    std::memset(w.out.data(), 0, nr * D * sizeof(float));
    for (int64_t c = 0; c < n_kv; ++c) {
        if (!any_row_sees(mask, nr, c)) continue;
        to_f32(at<ggml_fp16_t>(tv, c, hk, s), w.vf.data(), D);
        for (int64_t r = 0; r < nr; ++r) {
            if (mask[r][c] == kHidden) continue;
            const float p = std::exp(w.scores[r * n_kv + c] - max[r]);
            sum[r] += p;
            axpy(w.out.data() + r * D, p, w.vf.data(), D);
        }
    }

    for (int64_t r = 0; r < nr; ++r) {
        const float inv = sum[r] > 0.0f ? 1.0f / sum[r] : 0.0f;
        float * y = reinterpret_cast<float *>(static_cast<char *>(dst->data) + h * dst->nb[1] + (t0 + r) * dst->nb[2] +
                                              s * dst->nb[3]);
        for (int64_t i = 0; i < D; ++i) y[i] = w.out[r * D + i] * inv;
    }
}

// Work items (block of query rows, head, stream) are dealt to the threads in turn.
void run(ggml_tensor * dst, int ith, int nth, void * userdata) {
    float scale;
    std::memcpy(&scale, &userdata, sizeof(scale));
    const ggml_tensor * tq = dst->src[0];
    const int64_t D = tq->ne[0], T = tq->ne[1], n_head = tq->ne[2], n_streams = tq->ne[3];
    const int64_t n_blocks = (T + kBlock - 1) / kBlock;
    Scratch w(D, dst->src[1]->ne[1]);
    for (int64_t item = ith; item < n_blocks * n_head * n_streams; item += nth) {
        const int64_t b = item % n_blocks, h = (item / n_blocks) % n_head, s = item / (n_blocks * n_head);
        const int64_t t0 = b * kBlock;
        attend_rows(dst, t0, std::min(kBlock, T - t0), h, s, scale, w);
    }
}

}  // namespace

extern "C" {

ggml_tensor * ggml_ext_row_attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v,
                                     ggml_tensor * mask, float scale) {
    GGML_ASSERT(q->type == GGML_TYPE_F32 && k->type == GGML_TYPE_F16 && v->type == GGML_TYPE_F16);
    GGML_ASSERT(mask->type == GGML_TYPE_F16);
    GGML_ASSERT(q->nb[0] == sizeof(float) && mask->ne[1] >= q->ne[1]);
    GGML_ASSERT(k->ne[0] == q->ne[0] && v->ne[0] == q->ne[0] && k->ne[1] == v->ne[1]);
    GGML_ASSERT(k->ne[2] == v->ne[2] && q->ne[2] % k->ne[2] == 0);
    GGML_ASSERT(k->ne[3] == q->ne[3] && v->ne[3] == q->ne[3] && mask->ne[3] == q->ne[3]);
    GGML_ASSERT(mask->ne[0] >= k->ne[1]);
    GGML_ASSERT(k->nb[0] == sizeof(ggml_fp16_t) && v->nb[0] == sizeof(ggml_fp16_t));
    // The scale travels in the user pointer's bits: nothing to keep alive.
    static_assert(sizeof(float) <= sizeof(void *), "a float must fit a pointer");
    void * userdata = nullptr;
    std::memcpy(&userdata, &scale, sizeof(scale));
    ggml_tensor * args[4] = {q, k, v, mask};
    ggml_tensor * out = ggml_custom_4d(ctx, GGML_TYPE_F32, q->ne[0], q->ne[2], q->ne[1], q->ne[3], args, 4, run,
                                       GGML_N_TASKS_MAX, userdata);
    ggml_set_name(out, "row_attention");
    return out;
}
}
