// ggml_ext_row_attention against ggml_flash_attn_ext on the CPU: random
// queries, keys, values and masks (holes, additive values, a stream with
// every cell hidden), one or several query tokens per stream, head sizes with
// and without a vector tail, grouped-query heads, streams as strided views of
// one cache, several thread counts, with and without attention sinks and a
// soft-cap on the scores.

#include "ggml-ext/ops/row_attention.h"

#include <cmath>
#include <cstring>
#include <string>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "ggml-cpu.h"
#include "ggml.h"

namespace {

struct Shape {
    int64_t D, n_head, n_head_kv, n_kv, n_streams, stride;  // stride: cache rows between streams
    int64_t T;                                              // query tokens per stream
    int threads;
    bool sinks = false;    // a sink logit per head
    float softcap = 0.0f;  // scores soft-capped
};

class RowAttention : public ::testing::TestWithParam<Shape> {};

void fill(ggml_tensor * t, std::mt19937 & rng, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    const int64_t n = ggml_nelements(t);
    if (t->type == GGML_TYPE_F32) {
        for (int64_t i = 0; i < n; ++i) static_cast<float *>(t->data)[i] = u(rng);
    } else {
        for (int64_t i = 0; i < n; ++i) static_cast<ggml_fp16_t *>(t->data)[i] = ggml_fp32_to_fp16(u(rng));
    }
}

TEST_P(RowAttention, MatchesFlashAttention) {
    const Shape s = GetParam();
    ggml_init_params params = {256u << 20, nullptr, false};
    ggml_context * ctx = ggml_init(params);
    ASSERT_NE(ctx, nullptr);
    std::mt19937 rng(42);

    // Queries as the decoder has them: [D, n_head, tokens], T tokens per stream.
    ggml_tensor * q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, s.D, s.n_head, s.T * s.n_streams);
    fill(q, rng, -1.0f, 1.0f);
    ggml_tensor * q4 = ggml_permute(
        ctx, ggml_view_4d(ctx, q, s.D, s.n_head, s.T, s.n_streams, q->nb[1], q->nb[2], s.T * q->nb[2], 0), 0, 2, 1, 3);
    // One cache of rows [D * n_head_kv]; stream j reads rows [j * stride, j * stride + n_kv).
    const int64_t rows = (s.n_streams - 1) * s.stride + s.n_kv;
    ggml_tensor * kc = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, s.D * s.n_head_kv, rows);
    ggml_tensor * vc = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, s.D * s.n_head_kv, rows);
    fill(kc, rng, -1.0f, 1.0f);
    fill(vc, rng, -1.0f, 1.0f);
    auto view = [&](ggml_tensor * c) {
        return ggml_view_4d(ctx, c, s.D, s.n_kv, s.n_head_kv, s.n_streams, c->nb[1], ggml_row_size(c->type, s.D),
                            s.stride * c->nb[1], 0);
    };
    ggml_tensor * mask = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, s.n_kv, s.T, 1, s.n_streams);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    auto * m = static_cast<ggml_fp16_t *>(mask->data);
    for (int64_t j = 0; j < s.n_streams; ++j) {
        for (int64_t t = 0; t < s.T; ++t) {
            for (int64_t c = 0; c < s.n_kv; ++c) {
                // Stream 1 sees nothing; token t sees no cell past n_kv - T + t (causal).
                const bool hidden = j == 1 || c > s.n_kv - s.T + t || u(rng) < 0.3f;
                m[(j * s.T + t) * s.n_kv + c] = ggml_fp32_to_fp16(hidden ? -INFINITY : (u(rng) < 0.2f ? -1.5f : 0.0f));
            }
        }
    }
    const float scale = 1.0f / std::sqrt((float) s.D);
    ggml_tensor * sinks = nullptr;
    if (s.sinks) {
        // Around the scores' range, so that a sink sometimes dominates a row.
        sinks = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, s.n_head);
        fill(sinks, rng, -2.0f, 3.0f);
    }

    ggml_tensor * ours = ggml_ext_row_attention(ctx, q4, view(kc), view(vc), mask, sinks, scale, s.softcap);
    ggml_tensor * ref = ggml_flash_attn_ext(ctx, q4, view(kc), view(vc), mask, scale, 0.0f, s.softcap);
    ggml_prec_set_acc(ref, GGML_PREC_F32);
    if (sinks) ggml_flash_attn_ext_add_sinks(ref, sinks);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, ours);
    ggml_build_forward_expand(gf, ref);
    ASSERT_EQ(ggml_graph_compute_with_ctx(ctx, gf, s.threads), GGML_STATUS_SUCCESS);

    ASSERT_TRUE(ggml_are_same_shape(ours, ref));
    const auto * a = static_cast<const float *>(ours->data);
    const auto * b = static_cast<const float *>(ref->data);
    float worst = 0.0f;
    for (int64_t i = 0; i < ggml_nelements(ours); ++i) {
        ASSERT_TRUE(std::isfinite(a[i])) << i;
        worst = std::max(worst, std::fabs(a[i] - b[i]));
    }
    // ggml's kernel sums the values in F16 (ours in F32): differences of a
    // few F16 roundings of numbers below 1.
    EXPECT_LT(worst, 4e-3f);
    // The stream that sees no cell gives zeros.
    for (int64_t t = 0; s.n_streams > 1 && t < s.T; ++t) {
        for (int64_t h = 0; h < s.n_head; ++h) {
            for (int64_t d = 0; d < s.D; ++d) EXPECT_EQ(a[((1 * s.T + t) * s.n_head + h) * s.D + d], 0.0f);
        }
    }
    ggml_free(ctx);
}

// Each row's result is the same bits whichever tokens, heads and threads
// share its work item: T tokens of 8 query heads, in one call on 1 to 8
// threads, against every token alone on 1 to 8 threads. Over 2 KV heads
// every item has several rows; over 8, a token alone has one row per KV
// head, which reads its keys and values in place instead of through the
// converted copies, and an item of a token alone holds the heads of 1 to 8
// KV heads (as many as leave every thread an item). 130 cells end in a
// partial block. With and without a soft-cap on the scores. Past 2048
// cells a row's cells are taken in chunks: with one KV head, a token alone has
// fewer items than threads and its chunks are split between them, while 20
// tokens keep one thread per row; attention sinks join at the end.
struct BatchCase {
    int64_t n_head_kv;
    float softcap;
    int64_t n_kv = 130;
    int64_t T = 7;
    bool sinks = false;
};
class RowAttentionBatch : public ::testing::TestWithParam<BatchCase> {};

TEST_P(RowAttentionBatch, EveryRowIsTheSameInAnyBatchAndThreadCount) {
    constexpr int64_t D = 64, n_head = 8;
    const int64_t n_head_kv = GetParam().n_head_kv, n_kv = GetParam().n_kv, T = GetParam().T;
    const float softcap = GetParam().softcap;
    ggml_init_params params = {64u << 20, nullptr, false};
    ggml_context * ctx = ggml_init(params);
    ASSERT_NE(ctx, nullptr);
    std::mt19937 rng(7);
    ggml_tensor * q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, n_head, T);
    ggml_tensor * k = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, D, n_kv, n_head_kv, 1);
    ggml_tensor * v = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, D, n_kv, n_head_kv, 1);
    ggml_tensor * mask = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, n_kv, T, 1, 1);
    fill(q, rng, -1.0f, 1.0f);
    fill(k, rng, -1.0f, 1.0f);
    fill(v, rng, -1.0f, 1.0f);
    ggml_tensor * sinks = nullptr;
    if (GetParam().sinks) {
        sinks = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n_head);
        fill(sinks, rng, -2.0f, 3.0f);
    }
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t c = 0; c < n_kv; ++c) {
            static_cast<ggml_fp16_t *>(mask->data)[t * n_kv + c] =
                ggml_fp32_to_fp16(c > n_kv - T + t ? -INFINITY : 0.0f);
        }
    }
    auto tokens = [&](int64_t t0, int64_t nt) {
        return ggml_permute(
            ctx, ggml_view_4d(ctx, q, D, n_head, nt, 1, q->nb[1], q->nb[2], nt * q->nb[2], t0 * q->nb[2]), 0, 2, 1, 3);
    };
    auto compute = [&](ggml_tensor * out, int threads) {
        ggml_cgraph * gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, out);
        EXPECT_EQ(ggml_graph_compute_with_ctx(ctx, gf, threads), GGML_STATUS_SUCCESS);
        const float * y = static_cast<const float *>(out->data);
        return std::vector<float>(y, y + ggml_nelements(out));
    };
    std::vector<float> alone;  // [D, n_head] per token, token after token
    for (int64_t t = 0; t < T; ++t) {
        ggml_tensor * m =
            ggml_view_4d(ctx, mask, n_kv, 1, 1, 1, mask->nb[1], mask->nb[2], mask->nb[3], t * mask->nb[1]);
        const std::vector<float> y =
            compute(ggml_ext_row_attention(ctx, tokens(t, 1), k, v, m, sinks, 0.125f, softcap), 1);
        for (const int threads : {2, 3, 8}) {
            SCOPED_TRACE("alone, threads=" + std::to_string(threads));
            const std::vector<float> again =
                compute(ggml_ext_row_attention(ctx, tokens(t, 1), k, v, m, sinks, 0.125f, softcap), threads);
            EXPECT_EQ(0, std::memcmp(again.data(), y.data(), y.size() * sizeof(float)));
        }
        alone.insert(alone.end(), y.begin(), y.end());
    }
    // 8 threads: fewer items than threads, so each item takes half a group.
    for (const int threads : {1, 2, 3, 4, 8}) {
        SCOPED_TRACE("threads=" + std::to_string(threads));
        const std::vector<float> batch =
            compute(ggml_ext_row_attention(ctx, tokens(0, T), k, v, mask, sinks, 0.125f, softcap), threads);
        ASSERT_EQ(batch.size(), alone.size());
        EXPECT_EQ(0, std::memcmp(batch.data(), alone.data(), alone.size() * sizeof(float)));
    }
    ggml_free(ctx);
}

INSTANTIATE_TEST_SUITE_P(KvHeads, RowAttentionBatch,
                         ::testing::Values(BatchCase{2, 0.0f}, BatchCase{8, 0.0f}, BatchCase{8, 0.5f},
                                           BatchCase{1, 0.0f, 9000}, BatchCase{1, 0.0f, 9000, 20, true},
                                           BatchCase{2, 0.5f, 8500, 7, true}));

INSTANTIATE_TEST_SUITE_P(Shapes, RowAttention,
                         ::testing::Values(Shape{64, 12, 12, 256, 3, 300, 1, 2},       // head size 64, decode streams
                                           Shape{128, 8, 2, 200, 2, 200, 1, 3},        // grouped-query heads
                                           Shape{72, 4, 4, 97, 2, 128, 1, 1},          // a vector tail
                                           Shape{64, 16, 4, 600, 2, 600, 1, 4},        // a longer window
                                           Shape{64, 12, 6, 256, 2, 256, 40, 2},       // prompt chunks
                                           Shape{32, 4, 4, 64, 1, 64, 64, 3},          // a whole causal prompt
                                           Shape{64, 8, 2, 200, 2, 200, 1, 2, true},   // sinks, decode
                                           Shape{64, 8, 4, 128, 2, 128, 16, 3, true},  // sinks, prompt
                                           Shape{64, 8, 4, 128, 2, 128, 16, 2, false, 0.5f},  // soft-capped
                                           Shape{64, 8, 1, 9000, 2, 9000, 1, 4, true},        // chunks split, sinks
                                           Shape{128, 4, 1, 8300, 1, 8300, 3, 3}));           // chunks, a few tokens

}  // namespace
