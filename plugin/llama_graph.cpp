#include "plugin/llama_graph.h"

#include "plugin/hparams.h"
#include "plugin/kv_cache.h"
#include "plugin/weights.h"

#include <cmath>

#include "ggml.h"

namespace llama_tp {

namespace {

struct Builder {
    ggml_context * ctx;
    ggml_cgraph * gf;
    const HParams & hp;
    const ModelWeights & w;
    const KvCache & kv;
    const GraphShape & shape;
    GraphInputs & in;
    const Collective * reduce;

    // Sums a rank's partial result across the group (a no-op for one rank).
    ggml_tensor * all_reduce(ggml_tensor * x) const {
        return reduce ? ggml_cluster_allreduce(ctx, x, reduce->fn, reduce->user) : x;
    }

    ggml_tensor * norm(ggml_tensor * x, ggml_tensor * weight) const {
        return ggml_mul(ctx, ggml_rms_norm(ctx, x, hp.rms_eps), weight);
    }

    ggml_tensor * rope(ggml_tensor * x) const {
        return ggml_rope_ext(ctx, x, in.positions, w.rope_freqs, hp.n_rot, hp.rope_type, hp.rope_n_ctx_orig,
                             hp.rope_freq_base, hp.rope_freq_scale, hp.yarn_ext_factor, hp.yarn_attn_factor,
                             hp.yarn_beta_fast, hp.yarn_beta_slow);
    }

    // Writes this batch's keys or values into the cache and returns a view of
    // the first `window` cells as [head_dim, window, n_head_kv]. The view is
    // taken of the write's result so that it orders after it.
    ggml_tensor * store_and_view(ggml_tensor * cache, ggml_tensor * cur) const {
        const int64_t row = cache->ne[0];
        ggml_tensor * stored = ggml_set_rows(ctx, cache, ggml_reshape_2d(ctx, cur, row, shape.n_tokens), in.kv_cells);
        return ggml_view_3d(ctx, stored, hp.head_dim, shape.window, row / hp.head_dim, cache->nb[1],
                            ggml_row_size(cache->type, hp.head_dim), 0);
    }

};

}  // namespace

ggml_tensor * build_llama_graph(ggml_context * ctx, ggml_cgraph * gf, const HParams & hp, const ModelWeights & w,
                                const KvCache & kv, const GraphShape & shape, GraphInputs & in,
                                const Collective * reduce) {
    const int64_t T = shape.n_tokens;
    in.tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T);
    in.positions = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T);
    in.kv_cells = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, T);
    in.kq_mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, shape.window, T);
    in.out_rows = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, shape.n_outputs);
    for (ggml_tensor * t : {in.tokens, in.positions, in.kv_cells, in.kq_mask, in.out_rows}) ggml_set_input(t);

    Builder b{ctx, gf, hp, w, kv, shape, in, reduce};
    const float kq_scale = 1.0f / std::sqrt((float) hp.head_dim);
    const int64_t n_kv_local = kv.k(0)->ne[0] / hp.head_dim;
    const int64_t n_q_local = w.layers[0].wq->ne[1] / hp.head_dim;

    ggml_tensor * x = ggml_get_rows(ctx, w.tok_embd, in.tokens);
    for (int il = 0; il < hp.n_layer; ++il) {
        const LayerWeights & l = w.layers[il];
        ggml_tensor * cur = b.norm(x, l.attn_norm);

        ggml_tensor * q = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wq, cur), hp.head_dim, n_q_local, T);
        ggml_tensor * k = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wk, cur), hp.head_dim, n_kv_local, T);
        ggml_tensor * v = ggml_mul_mat(ctx, l.wv, cur);
        q = b.rope(q);
        k = b.rope(k);

        ggml_tensor * kview = b.store_and_view(kv.k(il), k);
        ggml_tensor * vview = b.store_and_view(kv.v(il), v);
        ggml_tensor * attn = ggml_flash_attn_ext(ctx, ggml_permute(ctx, q, 0, 2, 1, 3), kview, vview, in.kq_mask,
                                                 kq_scale, 0.0f, 0.0f);
        ggml_prec_set_acc(attn, GGML_PREC_F32);
        cur = ggml_mul_mat(ctx, l.wo, ggml_reshape_2d(ctx, attn, hp.head_dim * n_q_local, T));

        if (il == hp.n_layer - 1) {
            // Only the rows whose logits are wanted go on from here.
            cur = ggml_get_rows(ctx, cur, in.out_rows);
            x = ggml_get_rows(ctx, x, in.out_rows);
        }
        x = ggml_add(ctx, x, b.all_reduce(cur));

        cur = b.norm(x, l.ffn_norm);
        ggml_tensor * gate = ggml_mul_mat(ctx, l.ffn_gate, cur);
        ggml_tensor * up = ggml_mul_mat(ctx, l.ffn_up, cur);
        cur = ggml_mul_mat(ctx, l.ffn_down, ggml_swiglu_split(ctx, gate, up));
        x = ggml_add(ctx, x, b.all_reduce(cur));
    }
    x = b.norm(x, w.output_norm);
    ggml_tensor * logits = ggml_mul_mat(ctx, w.output, x);
    ggml_set_output(logits);
    ggml_build_forward_expand(gf, logits);
    return logits;
}

}  // namespace llama_tp
