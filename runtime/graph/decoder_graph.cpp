#include "runtime/graph/decoder_graph.h"

#include "runtime/graph/graph_builder.h"

#include <cmath>

#include "ggml.h"

namespace llama_tp {

ggml_tensor * rope_layer(ggml_context * ctx, ggml_tensor * x, ggml_tensor * positions, const HParams & hp,
                         const ModelWeights & w, const KvCache & kv, int il) {
    const bool swa = hp.is_swa(il);
    ggml_tensor * factors =
        hp.block(il).attention.rope_factors ? w.rope_factors(kv.all().n_cells_per_seq(), hp) : nullptr;
    return ggml_rope_ext(ctx, x, positions, factors, hp.layer(il).n_rot, hp.rope_type, hp.rope_n_ctx_orig,
                         swa ? hp.rope_freq_base_swa : hp.rope_freq_base,
                         swa ? hp.rope_freq_scale_swa : hp.rope_freq_scale, hp.yarn_ext_factor, hp.yarn_attn_factor,
                         hp.yarn_beta_fast, hp.yarn_beta_slow);
}

// The rows of a table split by vocabulary (token_embd) for the batch's
// tokens. Under tensor parallelism each token's row comes from the one
// rank whose slice holds it, the others add zeros: summed as doubles so
// that no wire rounds it.
ggml_tensor * GraphBuilder::lookup(ggml_tensor * table) const {
    if (!reduce) return ggml_get_rows(ctx, table, in.tokens);
    ggml_tensor * rows = ggml_mul(ctx, ggml_get_rows(ctx, table, in.embd_rows), in.embd_mask);
    return ggml_ext_exact_round(
        ctx, ggml_cluster_allreduce(ctx, ggml_ext_exact_sum(ctx, &rows, 1), reduce->fn, reduce->user));
}

// Gemma 4's per-layer inputs [n_embd_per_layer, n_tokens, n_layer]: each
// token's per-layer embedding plus the normed projection of its scaled
// embedding x, as upstream computes them.
ggml_tensor * GraphBuilder::per_layer_inputs(ggml_tensor * x) const {
    const int64_t PL = hp.n_embd_per_layer, T = shape.n_tokens;
    ggml_tensor * embd = ggml_reshape_3d(ctx, lookup(w.per_layer_tok_embd), PL, hp.n_layer, T);
    embd = ggml_scale(ctx, embd, std::sqrt((float) PL));
    ggml_tensor * proj = ggml_mul_mat(ctx, w.per_layer_model_proj, x);
    proj = ggml_scale(ctx, proj, 1.0f / std::sqrt((float) hp.n_embd));
    proj = norm(ggml_reshape_3d(ctx, proj, PL, hp.n_layer, T), w.per_layer_proj_norm);
    ggml_tensor * sum = ggml_scale(ctx, ggml_add(ctx, proj, embd), 1.0f / std::sqrt(2.0f));
    return ggml_cont(ctx, ggml_permute(ctx, sum, 0, 2, 1, 3));
}

// x plus layer il's per-layer input gated by x and projected back, normed
// (every rank alike: the weights are mirrored).
ggml_tensor * GraphBuilder::add_per_layer_input(int il, ggml_tensor * x, ggml_tensor * per_layer) const {
    const LayerWeights & l = w.layers[il];
    ggml_tensor * mine = ggml_view_2d(ctx, per_layer, per_layer->ne[0], per_layer->ne[1], per_layer->nb[1],
                                      (size_t) il * per_layer->nb[2]);
    ggml_tensor * cur = ggml_gelu(ctx, ggml_mul_mat(ctx, l.per_layer_gate, x));
    cur = ggml_mul_mat(ctx, l.per_layer_proj, ggml_mul(ctx, cur, mine));
    return ggml_add(ctx, x, norm(cur, l.per_layer_norm));
}

void build_key_shift_graph(ggml_context * ctx, ggml_cgraph * gf, const HParams & hp, const ModelWeights & w,
                           const KvCache & kv, KeyShift all, KeyShift window) {
    for (int il = 0; il < hp.n_layer_kv(); ++il) {
        const KeyShift & pool = kv.windowed(il) ? window : all;
        if (!pool.cells || !hp.keeps_kv(il)) continue;
        ggml_tensor *cells = pool.cells, *shift = pool.shift;
        const int64_t n = cells->ne[0];
        ggml_tensor * k = kv.k(il);
        // Gathered to F32 (any cache type), rotated, written back in the cache's type.
        ggml_tensor * rows = ggml_get_rows(ctx, k, cells);
        const int64_t hd = hp.layer(il).head_dim;
        rows = ggml_reshape_3d(ctx, rows, hd, w.shard().layers[il].kv_heads.size(), n);
        if (hp.block(il).attention.kind == AttentionBlock::Kind::MultiHeadLatent) {
            // Latent attention's key: the latent (or a head's unrotated
            // part), then its rotated part; only that turns.
            const int64_t r = hd - hp.layer(il).n_rot, heads = rows->ne[1];
            ggml_tensor * pe = ggml_view_3d(ctx, rows, hd - r, heads, n, rows->nb[1], rows->nb[2], r * rows->nb[0]);
            ggml_tensor * rest = ggml_view_3d(ctx, rows, r, heads, n, rows->nb[1], rows->nb[2], 0);
            rows = ggml_concat(ctx, rest, rope_layer(ctx, pe, shift, hp, w, kv, il), 0);
        } else {
            rows = rope_layer(ctx, rows, shift, hp, w, kv, il);
        }
        ggml_build_forward_expand(gf, ggml_set_rows(ctx, k, ggml_reshape_2d(ctx, rows, k->ne[0], n), cells));
    }
}

GraphOutputs build_decoder_graph(ggml_context * ctx, ggml_cgraph * gf, const HParams & hp, const ModelWeights & w,
                                 const KvCache & kv, const GraphShape & shape, GraphInputs & in,
                                 const GraphMode & mode) {
    const Collective * reduce = mode.reduce;
    const bool embeddings = mode.embeddings;
    const int64_t T = shape.n_tokens;
    in.positions = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T);
    in.kv_cells = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, T);
    in.kq_mask = ggml_new_tensor_1d(ctx, GGML_TYPE_F16, (int64_t) GraphShape::mask_size(shape.runs));
    in.out_rows = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, shape.n_outputs);
    for (ggml_tensor * t : {in.positions, in.kv_cells, in.kq_mask, in.out_rows}) ggml_set_input(t);
    in.kv_cells_swa = nullptr;
    in.kq_mask_swa = nullptr;
    if (hp.n_swa > 0) {
        in.kq_mask_swa = ggml_new_tensor_1d(ctx, GGML_TYPE_F16, (int64_t) GraphShape::mask_size(shape.swa_runs()));
        ggml_set_input(in.kq_mask_swa);
    }
    if (kv.window()) {
        in.kv_cells_swa = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, T);
        ggml_set_input(in.kv_cells_swa);
    }

    in.state_rows = nullptr;
    if (!shape.state_runs.empty()) {
        int64_t n_seqs = 0;
        for (const StateRun & r : shape.state_runs) n_seqs += r.n_seqs;
        in.state_rows = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_seqs);
        ggml_set_input(in.state_rows);
    }
    in.lora_scales.clear();
    for (size_t i = 0; i < w.lora_scales.size(); ++i) {
        in.lora_scales.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1, T));
        ggml_set_input(in.lora_scales.back());
    }
    GraphBuilder b{ctx,
                   gf,
                   hp,
                   w,
                   kv,
                   shape,
                   in,
                   reduce,
                   mode.split_invariant,
                   mode.ops == RankOps::Host,
                   {},
                   std::vector<ggml_tensor *>(w.lora_scales.size())};
    if (reduce) {
        in.embd_rows = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T);
        in.embd_mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1, T);
        ggml_set_input(in.embd_rows);
        ggml_set_input(in.embd_mask);
    } else {
        in.tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T);
        ggml_set_input(in.tokens);
    }
    ggml_tensor * x = b.lookup(w.tok_embd);
    if (hp.embedding_scale != 0.0f) x = ggml_scale(ctx, x, hp.embedding_scale);
    in.hidden = nullptr;
    if (hp.mtp_head) {
        // The token's embedding and the hidden state before it, each normed,
        // side by side into one projection (every rank alike: mirrored).
        in.hidden = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.n_embd, T);
        ggml_set_input(in.hidden);
        x = ggml_concat(ctx, b.norm(x, w.mtp_enorm), b.norm(in.hidden, w.mtp_hnorm), 0);
        x = ggml_mul_mat(ctx, w.mtp_eh_proj, x);
    }
    ggml_tensor * per_layer = hp.n_embd_per_layer > 0 ? b.per_layer_inputs(x) : nullptr;
    // Only the rows whose logits are wanted go on from the last layer's
    // attention, or after the final norm (HParams::rows_after_norm, and
    // where every token's hidden state is kept).
    const bool rows_at_end = hp.rows_after_norm || mode.keep_hidden;
    for (int il = 0; il < hp.n_layer; ++il) {
        const LayerWeights & l = w.layers[il];
        ggml_tensor * rows = il == hp.n_layer - 1 && !rows_at_end ? in.out_rows : nullptr;
        ggml_tensor * normed = b.norm(x, l.attn_norm);
        ggml_tensor * cur = nullptr;
        switch (hp.block(il).attention.kind) {
            case AttentionBlock::Kind::GroupedQuery:
                cur = b.attention(il, normed, rows);
                break;
            case AttentionBlock::Kind::GatedDeltaNet:
                cur = b.delta_net(il, normed, rows);
                break;
            case AttentionBlock::Kind::MultiHeadLatent:
                cur = b.latent_attention(il, normed, rows);
                break;
        }
        if (l.attn_post_norm) cur = b.norm(cur, l.attn_post_norm);
        if (rows) x = ggml_get_rows(ctx, x, rows);
        x = ggml_add(ctx, x, cur);
        cur = b.ffn(il, x);
        if (l.ffn_post_norm) cur = b.norm(cur, l.ffn_post_norm);
        x = ggml_add(ctx, x, cur);
        if (per_layer) x = b.add_per_layer_input(il, x, per_layer);
        if (l.out_scale) x = ggml_mul(ctx, x, l.out_scale);
        if (l.control) x = ggml_add(ctx, x, l.control);
    }
    GraphOutputs outputs;
    ggml_tensor * hidden = b.norm(x, w.output_norm);
    if (mode.keep_hidden) {
        outputs.hidden = hidden;
        ggml_set_output(hidden);
        ggml_build_forward_expand(gf, hidden);
    }
    if (rows_at_end) hidden = ggml_get_rows(ctx, hidden, in.out_rows);
    ggml_tensor * out = embeddings ? hidden : b.project(w.output, hidden);
    if (!embeddings && hp.final_logit_softcap != 0.0f) {
        out = ggml_scale(ctx, out, 1.0f / hp.final_logit_softcap);
        out = ggml_scale(ctx, ggml_tanh(ctx, out), hp.final_logit_softcap);
    }
    ggml_set_output(out);
    ggml_build_forward_expand(gf, out);
    outputs.logits = out;
    return outputs;
}

}  // namespace llama_tp
