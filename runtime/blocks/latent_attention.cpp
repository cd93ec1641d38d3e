// Multi-head latent attention (deepseek2): its weights and its graph. Every
// rank computes the token's compressed latent and its RoPE part (the same
// for all heads) and caches them whole, one row per token; its queries and
// the latent's per-head expansion are the rank's heads. Attention runs over
// the cached latent itself, as upstream's absorbed form: each head's query
// is taken into the latent's space through attn_k_b, the weighted latent
// out of it through attn_v_b, so decoding reads the latent once per token.
#include "runtime/graph/graph_builder.h"
#include "runtime/model/weight_declarer.h"

#include <cmath>

#include "ggml.h"

namespace llama_tp {

// The rank's heads of the queries (wq_b's or wq's rows), of attn_k_b and
// attn_v_b (their matrices) and of attn_output (its columns, row-parallel);
// the low-rank pair's first half, the latent's projection and the norms
// mirrored.
void declare_latent_attention_weights(WeightDeclarer & d, int il, LayerWeights & l) {
    const HParams & hp = d.hp;
    const LatentShape & m = hp.mla;
    const RankShard & shard = d.shard();
    const std::string p = hp.tensor_prefix(il);
    const int64_t E = hp.n_embd, H = hp.n_head;
    const TensorSlice q_rows = d.rows(shard.q_heads, m.head_k);
    l.attn_norm = d.declare(p + "attn_norm.weight", {E}, false);
    if (m.q_rank > 0) {
        l.wq_a = d.declare(p + "attn_q_a.weight", {E, m.q_rank}, true);
        l.q_a_norm = d.declare(p + "attn_q_a_norm.weight", {m.q_rank}, false);
        l.wq_b = d.declare(p + "attn_q_b.weight", {m.q_rank, H * m.head_k}, true, q_rows);
    } else {
        l.wq = d.declare(p + "attn_q.weight", {E, H * m.head_k}, true, q_rows);
    }
    l.wkv_a = d.declare(p + "attn_kv_a_mqa.weight", {E, m.cache_row()}, true);
    l.kv_a_norm = d.declare(p + "attn_kv_a_norm.weight", {m.kv_rank}, false);
    if (m.expanded) {
        // Each head's key rows, then its value rows.
        l.wkv_b = d.declare(p + "attn_kv_b.weight", {m.kv_rank, H * (m.nope() + m.head_v)}, true,
                            d.rows(shard.q_heads, m.nope() + m.head_v));
    } else {
        l.wk_b = d.declare(p + "attn_k_b.weight", {m.nope(), m.kv_rank, H}, true, d.planes(shard.q_heads));
        l.wv_b = d.declare(p + "attn_v_b.weight", {m.kv_rank, m.head_v, H}, true, d.planes(shard.q_heads));
    }
    l.wo = d.row_parallel(p + "attn_output.weight", {H * m.head_v, E}, shard.o_pieces, m.head_v, false);
}

// upstream's deepseek2 scale: YaRN's magnitude over all dimensions, squared,
// over sqrt(head_k), in its float steps (the rotation's own factor taken out).
float latent_attention_scale(const HParams & hp) {
    const float attn_factor = hp.yarn_attn_factor * (1.0f + 0.1f * std::log(1.0f / hp.rope_freq_scale));
    const float mscale = attn_factor * (1.0f + 0.1f * hp.rope_yarn_log_mul * std::log(1.0f / hp.rope_freq_scale));
    return 1.0f * mscale * mscale / std::sqrt((float) hp.mla.head_k);
}

// Latent attention, projected back to n_embd and summed over the group
// (rows: see row_parallel). The cache row is the normed latent, then its
// rotated part; a query is its head's latent-space query, then its rotated
// part, so that their dot product is the head's score.
ggml_tensor * GraphBuilder::latent_attention(int il, ggml_tensor * cur, ggml_tensor * rows) {
    const LayerWeights & l = w.layers[il];
    const LatentShape & m = hp.mla;
    const int64_t T = shape.n_tokens, nq = n_q(il);
    ggml_tensor * q = l.wq_a ? project(l.wq_b, norm(project(l.wq_a, cur), l.q_a_norm)) : project(l.wq, cur);
    q = ggml_reshape_3d(ctx, q, m.head_k, nq, T);
    ggml_tensor * q_nope = ggml_view_3d(ctx, q, m.nope(), nq, T, q->nb[1], q->nb[2], 0);
    ggml_tensor * q_pe = ggml_view_3d(ctx, q, m.n_rot, nq, T, q->nb[1], q->nb[2], ggml_row_size(q->type, m.nope()));
    q_pe = rope(q_pe, il);

    ggml_tensor * kv_pe = project(l.wkv_a, cur);  // [kv_rank + n_rot, T]
    const size_t row = kv_pe->nb[1];
    ggml_tensor * latent = norm(ggml_view_2d(ctx, kv_pe, m.kv_rank, T, row, 0), l.kv_a_norm);
    ggml_tensor * k_pe = ggml_view_3d(ctx, kv_pe, m.n_rot, 1, T, row, row, ggml_row_size(kv_pe->type, m.kv_rank));
    k_pe = rope(k_pe, il);
    if (m.expanded) return expanded_latent_attention(il, ggml_concat(ctx, q_nope, q_pe, 0), latent, k_pe, rows);
    // [kv_rank, T, heads] per head, then back to [kv_rank, heads, T].
    ggml_tensor * q_latent = ggml_mul_mat(ctx, l.wk_b, ggml_permute(ctx, q_nope, 0, 2, 1, 3));
    q = ggml_concat(ctx, ggml_permute(ctx, q_latent, 0, 2, 1, 3), q_pe, 0);
    ggml_tensor * k = ggml_concat(ctx, ggml_reshape_3d(ctx, latent, m.kv_rank, 1, T), k_pe, 0);
    ggml_tensor * k_stored = store(il, kv.k(il), k);
    stored.push_back({k_stored, nullptr});

    ggml_tensor * attn = attend_runs(il, q, k_stored, k_stored);  // [kv_rank, heads, tokens]
    // Each head's weighted latent out through its attn_v_b: [head_v, heads, T].
    ggml_tensor * out = ggml_mul_mat(ctx, l.wv_b, ggml_permute(ctx, attn, 0, 2, 1, 3));
    out = ggml_cont(ctx, ggml_permute(ctx, out, 0, 2, 1, 3));
    return project(l.wo, ggml_reshape_2d(ctx, out, m.head_v * nq, T), rows);
}

// The expanded form, as upstream computes it for files with attn_kv_b:
// the latent expanded to each of the rank's heads' key (then the shared
// rotated part) and value, cached per head, attended over as grouped-query
// attention of one query head per KV head.
ggml_tensor * GraphBuilder::expanded_latent_attention(int il, ggml_tensor * q, ggml_tensor * latent, ggml_tensor * k_pe,
                                                      ggml_tensor * rows) {
    const LayerWeights & l = w.layers[il];
    const LatentShape & m = hp.mla;
    const int64_t T = shape.n_tokens, nq = n_q(il);
    ggml_tensor * kv_heads = project(l.wkv_b, latent);  // each head's key rows, then its value rows
    const size_t head = ggml_row_size(kv_heads->type, m.nope() + m.head_v);
    ggml_tensor * k_nope = ggml_view_3d(ctx, kv_heads, m.nope(), nq, T, head, kv_heads->nb[1], 0);
    ggml_tensor * v = ggml_cont(ctx, ggml_view_3d(ctx, kv_heads, m.head_v, nq, T, head, kv_heads->nb[1],
                                                  ggml_row_size(kv_heads->type, m.nope())));
    ggml_tensor * k = ggml_concat(ctx, k_nope, ggml_repeat_4d(ctx, k_pe, m.n_rot, nq, T, 1), 0);
    stored.push_back({store(il, kv.k(il), k), store(il, kv.v(il), v)});
    const auto [k_stored, v_stored] = stored.back();
    ggml_tensor * attn = attend_runs(il, q, k_stored, v_stored);  // [head_v, heads, tokens]
    return project(l.wo, ggml_reshape_2d(ctx, attn, m.head_v * nq, T), rows);
}

}  // namespace llama_tp
