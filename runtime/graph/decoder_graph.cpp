#include "runtime/graph/decoder_graph.h"

#include "ggml-ext/ops/exact_matmul.h"
#include "ggml-ext/ops/exact_sum.h"
#include "ggml-ext/ops/row_attention.h"

#include "runtime/model/hparams.h"
#include "runtime/kv/kv_cache.h"
#include "runtime/model/weights.h"

#include <cmath>

#include "ggml.h"

namespace llama_tp {

namespace {

// RoPE of layer il at the given positions (a forward pass's, or a shift's):
// sliding-window layers rotate with their own base and frequency scale, and
// some (AttentionBlock::rope_factors) without the model's frequency factors.
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

struct Builder {
    ggml_context * ctx;
    ggml_cgraph * gf;
    const HParams & hp;
    const ModelWeights & w;
    const KvCache & kv;
    const GraphShape & shape;
    GraphInputs & in;
    const Collective * reduce;
    bool exact;          // split-invariant sums
    bool row_attention;  // GraphMode::ops is RankOps::Host: ggml-ext's row attention may run
    // Each layer's keys and values as written to the cache, for the layers
    // that share it (views of the write's result order after the write).
    std::vector<std::pair<ggml_tensor *, ggml_tensor *>> stored;
    // The LoRA scale inputs picked at the output rows, made once each.
    mutable std::vector<ggml_tensor *> picked_scales;

    int64_t head_dim(int il) const { return hp.layer(il).head_dim; }
    // This rank's query heads and layer il's KV heads.
    int64_t n_q(int il) const { return w.layers[il].wo.cell_bounds.back() / head_dim(il); }
    int64_t n_kv(int il) const { return kv.k(il)->ne[0] / head_dim(il); }

    // Sums a rank's partial result across the group (a no-op for one rank).
    ggml_tensor * all_reduce(ggml_tensor * x) const {
        return reduce ? ggml_cluster_allreduce(ctx, x, reduce->fn, reduce->user) : x;
    }

    // x @ W summed over the group, for a row-parallel W (RowParallelWeight):
    // product(piece, its columns of x) is one piece's partial result. Without
    // split-invariant sums there is one piece, reduced in F32. With them every
    // cell of the reduction grid is summed on its own and the cells are added
    // in double, in one pass (ggml-ext/ops/exact_matmul.h) or one product per cell
    // (ggml-ext/ops/exact_sum.h); the doubles are reduced and the total is rounded
    // once. rows, when given, picks the result rows that go on (before the
    // reduction).
    template <typename Product>
    ggml_tensor * row_parallel(const RowParallelWeight & weight, ggml_tensor * x, ggml_tensor * rows,
                               const Product & product) const {
        const std::vector<int64_t> & cells = weight.cell_bounds;
        if (!exact) {
            ggml_tensor * part = product(weight.pieces[0], x);
            return all_reduce(rows ? ggml_get_rows(ctx, part, rows) : part);
        }
        if (weight.one_pass) {
            // Each output of the one-pass product depends on its own token
            // only, so the rows can be picked first.
            if (rows) x = ggml_get_rows(ctx, x, rows);
            if (!reduce) return ggml_ext_exact_matmul(ctx, weight.pieces[0], x, cells.data(), GGML_TYPE_F32);
            return exact_total(ggml_ext_exact_matmul(ctx, weight.pieces[0], x, cells.data(), GGML_TYPE_F64));
        }
        std::vector<ggml_tensor *> parts;
        size_t offset = 0;
        for (ggml_tensor * w : weight.pieces) {
            ggml_tensor * xs = ggml_view_3d(ctx, x, w->ne[0], x->ne[1], x->ne[2], x->nb[1], x->nb[2], offset);
            // Contiguous: the kernels of repacked weights quantize four input
            // rows at a time as if they were contiguous, so a strided view
            // gave wrong products (q4_K, max |dp| 1.0).
            parts.push_back(product(w, ggml_cont(ctx, xs)));
            offset += (size_t) w->ne[0] * x->nb[0];
        }
        ggml_tensor * sum = exact_total(ggml_ext_exact_sum(ctx, parts.data(), (int) parts.size()));
        return rows ? ggml_get_rows(ctx, sum, rows) : sum;
    }

    // A product for row_parallel: the plain matrix product.
    auto matmul() const {
        return [this](ggml_tensor * w, ggml_tensor * x) { return ggml_mul_mat(ctx, w, x); };
    }

    // y plus every active adapter's scale * B (A x) for the matrix base, as
    // upstream adds them (after the product, before a bias). A column-
    // parallel base's A is whole, so A x is too; a row-parallel one's A x is
    // summed across ranks as x @ W is (exactly, with split-invariant sums),
    // so every rank then adds the same B (A x). rows: the rows of x that go
    // on (row_parallel's).
    ggml_tensor * with_lora(ggml_tensor * y, const ggml_tensor * base, bool row_parallel_base, ggml_tensor * x,
                            ggml_tensor * rows) const {
        for (size_t a = 0; a < w.loras.size(); ++a) {
            const LoraWeight * lw = (shape.lora_active >> a) & 1 ? w.lora(a, base) : nullptr;
            if (!lw) continue;
            ggml_tensor * t =
                row_parallel_base ? row_parallel(lw->a, x, rows, matmul()) : ggml_mul_mat(ctx, lw->a.pieces.front(), x);
            y = ggml_add(ctx, y, ggml_mul(ctx, ggml_mul_mat(ctx, lw->b, t), lora_scale(lw->scale, y->ne[1])));
        }
        return y;
    }
    // A LoRA scale input for n token rows: every token's, or after the last
    // layer picked the output rows, theirs.
    ggml_tensor * lora_scale(int i, int64_t n) const {
        ggml_tensor * scale = in.lora_scales[i];
        if (n == scale->ne[1]) return scale;
        GGML_ASSERT(n == in.out_rows->ne[0]);
        if (!picked_scales[i]) picked_scales[i] = ggml_get_rows(ctx, scale, in.out_rows);
        return picked_scales[i];
    }
    // The experts' form of with_lora, as upstream's: each token's picked
    // experts' pairs, y += scale * B_e (A_e x). x: [n_in, 1 or K, T].
    ggml_tensor * with_lora_id(ggml_tensor * y, const ggml_tensor * base, ggml_tensor * x, ggml_tensor * picked) const {
        for (size_t a = 0; a < w.loras.size(); ++a) {
            const LoraWeight * lw = (shape.lora_active >> a) & 1 ? w.lora(a, base) : nullptr;
            if (!lw) continue;
            ggml_tensor * t = ggml_mul_mat_id(ctx, lw->a.pieces.front(), x, picked);
            y = ggml_add(ctx, y, lora_id_change(*lw, t, picked));
        }
        return y;
    }
    // scale * B_e t for every token's picked experts (t: [rank, K, T]).
    ggml_tensor * lora_id_change(const LoraWeight & lw, ggml_tensor * t, ggml_tensor * picked) const {
        ggml_tensor * scale = lora_scale(lw.scale, t->ne[2]);
        return ggml_mul(ctx, ggml_mul_mat_id(ctx, lw.b, t, picked), ggml_reshape_3d(ctx, scale, 1, 1, t->ne[2]));
    }
    // A matrix that needs no exact sums: ggml's product, or the one-pass
    // kernel's with one cell (ModelWeights::one_pass_product).
    ggml_tensor * product(ggml_tensor * weight, ggml_tensor * x) const {
        if (w.one_pass_product(weight)) return ggml_ext_exact_matmul(ctx, weight, x, nullptr, GGML_TYPE_F32);
        return ggml_mul_mat(ctx, weight, x);
    }
    ggml_tensor * project(ggml_tensor * weight, ggml_tensor * x) const {
        return with_lora(product(weight, x), weight, false, x, nullptr);
    }
    // row_parallel's matrix product with the adapters' changes.
    ggml_tensor * project(const RowParallelWeight & weight, ggml_tensor * x, ggml_tensor * rows) const {
        return with_lora(row_parallel(weight, x, rows, matmul()), weight.pieces.front(), true, x, rows);
    }

    // A rank's double sums reduced across the group and rounded once.
    ggml_tensor * exact_total(ggml_tensor * acc) const {
        if (reduce) acc = ggml_cluster_allreduce(ctx, acc, reduce->fn_f64, reduce->user);
        return ggml_ext_exact_round(ctx, acc);
    }

    ggml_tensor * norm(ggml_tensor * x, ggml_tensor * weight) const {
        return ggml_mul(ctx, ggml_rms_norm(ctx, x, hp.rms_eps), weight);
    }

    ggml_tensor * rope(ggml_tensor * x, int il) const { return rope_layer(ctx, x, in.positions, hp, w, kv, il); }

    // x @ w (+ b), split into heads.
    ggml_tensor * project_heads(ggml_tensor * x, ggml_tensor * weight, ggml_tensor * bias, int64_t hd,
                                int64_t n_heads) const {
        ggml_tensor * y = project(weight, x);
        if (bias) y = ggml_add(ctx, y, bias);
        return ggml_reshape_3d(ctx, y, hd, n_heads, shape.n_tokens);
    }

    // Writes this batch's keys or values ([head_dim, heads, tokens], the
    // heads of a token contiguous) into layer il's cache, in its pool's cells.
    // Views of the cache are taken of the write's result so that they order
    // after it.
    ggml_tensor * store(int il, ggml_tensor * cache, ggml_tensor * cur) const {
        return ggml_set_rows(ctx, cache, ggml_view_2d(ctx, cur, cache->ne[0], shape.n_tokens, cur->nb[2], 0),
                             kv.windowed(il) ? in.kv_cells_swa : in.kv_cells);
    }

    // Q, K and V of the rank's heads: [head_dim, heads, tokens] each, from
    // three products or views of one (a fused matrix).
    struct Qkv {
        ggml_tensor *q, *k, *v;
    };
    Qkv project_qkv(int il, ggml_tensor * cur) const {
        const LayerWeights & l = w.layers[il];
        const int64_t hd = head_dim(il), nq = n_q(il), nkv = n_kv(il);
        if (!l.wqkv) {
            // Without a V matrix (Gemma 4's global layers) the values are the keys' projection.
            ggml_tensor * k = project_heads(cur, l.wk, l.bk, hd, nkv);
            return {project_heads(cur, l.wq, l.bq, hd, nq), k, l.wv ? project_heads(cur, l.wv, l.bv, hd, nkv) : k};
        }
        ggml_tensor * qkv = project(l.wqkv, cur);
        const size_t head = ggml_row_size(qkv->type, hd);
        auto heads = [&](int64_t n, int64_t first) {
            return ggml_view_3d(ctx, qkv, hd, n, shape.n_tokens, head, qkv->nb[1], first * head);
        };
        return {heads(nq, 0), heads(nkv, nq), heads(nkv, nq + nkv)};
    }

    // Each stream's cells of a stored cache: [head_dim, window, n_kv, n_streams].
    ggml_tensor * cache_view(int il, ggml_tensor * stored, const AttentionRun & run) const {
        const size_t cell = stored->nb[1];
        return ggml_view_4d(ctx, stored, head_dim(il), run.window, n_kv(il), run.n_streams, cell,
                            ggml_row_size(stored->type, head_dim(il)), (size_t) run.stride * cell,
                            (size_t) run.cell0 * cell);
    }

    // Attention of one run's queries (of q [head_dim, n_q, n_tokens]) over
    // their streams' cells: [head_dim, n_q, run.size()]. With per-sequence
    // regions every row goes through ggml-ext's row attention, so a position
    // gets the same numbers in a prompt, as a decode token or after a cached
    // prefix; the shared pool keeps ggml's kernel, identical to upstream.
    ggml_tensor * attend(int il, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, const AttentionRun & run,
                         ggml_tensor * kq_mask, size_t mask_offset) const {
        const int64_t hd = head_dim(il), nq = n_q(il);
        ggml_tensor * sinks = w.layers[il].attn_sinks;
        ggml_tensor * qr = ggml_view_4d(ctx, q, hd, nq, run.n_tokens, run.n_streams, q->nb[1], q->nb[2],
                                        (size_t) run.n_tokens * q->nb[2], (size_t) run.t0 * q->nb[2]);
        const size_t row = (size_t) run.window * sizeof(ggml_fp16_t);
        ggml_tensor * mask = ggml_view_4d(ctx, kq_mask, run.window, run.n_tokens, 1, run.n_streams, row,
                                          row * run.n_tokens, row * run.n_tokens, mask_offset * sizeof(ggml_fp16_t));
        ggml_tensor * qp = ggml_permute(ctx, qr, 0, 2, 1, 3);
        const float scale = hp.query_scale != 0.0f ? 1.0f : 1.0f / std::sqrt((float) hd);
        ggml_tensor * out = nullptr;
        // Row attention reads F16 caches only, on the CPU.
        if (row_attention && !kv.all().unified() && kv.types().both_f16()) {
            out = ggml_ext_row_attention(ctx, qp, cache_view(il, k, run), cache_view(il, v, run), mask, sinks, scale,
                                         hp.attn_logit_softcap);
        } else {
            out = ggml_flash_attn_ext(ctx, qp, cache_view(il, k, run), cache_view(il, v, run), mask, scale, 0.0f,
                                      hp.attn_logit_softcap);
            ggml_prec_set_acc(out, GGML_PREC_F32);
            if (sinks) ggml_flash_attn_ext_add_sinks(out, sinks);
        }
        return ggml_reshape_3d(ctx, out, hd, nq, run.size());
    }

    // Self-attention, projected back to n_embd and summed over the group
    // (rows: see row_parallel). Each rank computes its heads; each run attends
    // only over its own cells; the runs' results are joined in token order.
    ggml_tensor * attention(int il, ggml_tensor * cur, ggml_tensor * rows) {
        const LayerWeights & l = w.layers[il];
        ggml_tensor * q = nullptr;
        if (il < hp.n_layer_kv()) {
            auto [qp, k, v] = project_qkv(il, cur);
            q = qp;
            if (l.k_norm) k = norm(k, l.k_norm);
            if (hp.block(il).attention.value_norm) v = ggml_rms_norm(ctx, v, hp.rms_eps);
            k = rope(k, il);
            stored.push_back({store(il, kv.k(il), k), store(il, kv.v(il), v)});
        } else {
            q = project_heads(cur, l.wq, l.bq, head_dim(il), n_q(il));
        }
        if (l.q_norm) q = norm(q, l.q_norm);
        q = rope(q, il);
        if (hp.query_scale != 0.0f && hp.query_scale != 1.0f) q = ggml_scale(ctx, q, hp.query_scale);
        const auto [k_stored, v_stored] = stored[hp.kv_layer(il)];
        ggml_tensor * attn = nullptr;
        size_t mask_offset = 0;
        for (const AttentionRun & run : hp.is_swa(il) ? shape.swa_runs() : shape.runs) {
            ggml_tensor * part =
                attend(il, q, k_stored, v_stored, run, hp.is_swa(il) ? in.kq_mask_swa : in.kq_mask, mask_offset);
            attn = attn ? ggml_concat(ctx, attn, part, 2) : part;
            mask_offset += (size_t) run.window * run.size();
        }
        ggml_tensor * out = project(l.wo, ggml_reshape_2d(ctx, attn, head_dim(il) * n_q(il), shape.n_tokens), rows);
        return l.bo ? ggml_add(ctx, out, l.bo) : out;
    }

    // The gate's activation times up (FfnBlock::Gate).
    ggml_tensor * gated(const FfnBlock & ffn, ggml_tensor * gate, ggml_tensor * up) const {
        switch (ffn.gate) {
            case FfnBlock::Gate::GeGlu:
                return ggml_geglu_split(ctx, gate, up);
            case FfnBlock::Gate::SwiGluClamped:
                return ggml_swiglu_oai(ctx, gate, up, 1.702f, 7.0f);
            case FfnBlock::Gate::SwiGlu:
                break;
        }
        return ggml_swiglu_split(ctx, gate, up);
    }

    // The dense gated FFN, each rank computing its slice of the width,
    // summed over the group.
    ggml_tensor * dense_ffn(const FfnBlock & ffn, const LayerWeights & l, ggml_tensor * cur) const {
        ggml_tensor * h = nullptr;
        if (l.ffn_gate_up) {
            h = ggml_swiglu(ctx, project(l.ffn_gate_up, cur));  // the gate half, then the up half
        } else {
            ggml_tensor * gate = project(l.ffn_gate, cur);
            ggml_tensor * up = project(l.ffn_up, cur);
            h = gated(ffn, gate, up);
        }
        return project(l.ffn_down, h, nullptr);
    }

    // Mixture of experts: the router is mirrored, so every rank picks the same
    // experts; each rank runs its slice of every picked expert's width and
    // weights it, and the routed experts are summed before the one reduction
    // over the group.
    // router_in: what the router reads (Gemma 4: the layer's input, RMS-normed
    // and scaled by 1/sqrt(n_embd) and a weight; else cur).
    ggml_tensor * moe_ffn(const FfnBlock & ffn, const LayerWeights & l, ggml_tensor * cur,
                          ggml_tensor * router_in) const {
        const int64_t T = cur->ne[1], K = hp.n_expert_used;
        ggml_tensor * logits = ggml_mul_mat(ctx, l.ffn_router, router_in);  // [n_expert, T]
        if (l.ffn_router_b) logits = ggml_add(ctx, logits, l.ffn_router_b);
        // Picked by the logits and the picked softmaxed, or all logits
        // softmaxed, picked, and the picked normalised.
        ggml_tensor * probs = ffn.softmax_after_top_k ? logits : ggml_soft_max(ctx, logits);
        ggml_tensor * picked = ggml_argsort_top_k(ctx, probs, (int) K);  // [K, T]
        ggml_tensor * weights = ggml_get_rows(ctx, ggml_reshape_3d(ctx, probs, 1, hp.n_expert, T), picked);
        weights = ggml_reshape_2d(ctx, weights, K, T);
        weights =
            ffn.softmax_after_top_k ? ggml_soft_max(ctx, weights) : ggml_div(ctx, weights, ggml_sum_rows(ctx, weights));
        if (hp.expert_weights_scale != 0.0f && hp.expert_weights_scale != 1.0f) {
            weights = ggml_scale(ctx, weights, hp.expert_weights_scale);
        }
        ggml_tensor * x = ggml_reshape_3d(ctx, cur, cur->ne[0], 1, T);
        ggml_tensor *gate = nullptr, *up = nullptr;
        if (l.ffn_gate_up_exps) {
            // The rank's gate rows, then its up rows, of every picked expert.
            ggml_tensor * gu = with_lora_id(ggml_mul_mat_id(ctx, l.ffn_gate_up_exps, x, picked), l.ffn_gate_up_exps, x,
                                            picked);  // [2 F_r, K, T]
            const int64_t F = gu->ne[0] / 2;
            gate = ggml_view_3d(ctx, gu, F, gu->ne[1], gu->ne[2], gu->nb[1], gu->nb[2], 0);
            up = ggml_view_3d(ctx, gu, F, gu->ne[1], gu->ne[2], gu->nb[1], gu->nb[2], F * gu->nb[0]);
        } else {
            gate = with_lora_id(ggml_mul_mat_id(ctx, l.ffn_gate_exps, x, picked), l.ffn_gate_exps, x,
                                picked);  // [F_r, K, T]
            up = with_lora_id(ggml_mul_mat_id(ctx, l.ffn_up_exps, x, picked), l.ffn_up_exps, x, picked);
        }
        if (l.ffn_up_exps_b) up = ggml_add_id(ctx, up, l.ffn_up_exps_b, picked);
        if (l.ffn_gate_exps_b) gate = ggml_add_id(ctx, gate, l.ffn_gate_exps_b, picked);
        ggml_tensor * h = gated(ffn, gate, up);
        // Gemma 4's scale per expert, picked for every token's experts.
        ggml_tensor * expert_scale = nullptr;
        if (l.ffn_down_exps_scale) {
            ggml_tensor * s = ggml_reshape_3d(ctx, l.ffn_down_exps_scale, 1, hp.n_expert, 1);
            expert_scale = ggml_get_rows(ctx, ggml_repeat_4d(ctx, s, 1, hp.n_expert, T, 1), picked);
        }
        // The adapters' change of the down projection: A_e h summed across
        // ranks as the projection is (exactly with split-invariant sums), then
        // B_e of it on the rank that adds it.
        std::vector<ggml_tensor *> down_changes;
        for (size_t a = 0; a < w.loras.size(); ++a) {
            const LoraWeight * lw = (shape.lora_active >> a) & 1 ? w.lora(a, l.ffn_down_exps.pieces.front()) : nullptr;
            if (!lw) continue;
            auto a_product = [&](ggml_tensor * piece, ggml_tensor * act) {
                return ggml_mul_mat_id(ctx, piece, act, picked);
            };
            ggml_tensor * t = row_parallel(lw->a, h, nullptr, a_product);
            // Every rank runs the sum, in this order, also where its pieces
            // do not add the change.
            ggml_build_forward_expand(gf, t);
            if (l.ffn_down_exps.first) down_changes.push_back(lora_id_change(*lw, t, picked));
        }
        // One piece of every picked expert's down projection, weighted and
        // summed over the experts, in upstream's order: the expert scale, the
        // adapters' change and the bias (those two with the first cell of the
        // width only, so that they count once), then the router's weight.
        auto experts = [&](ggml_tensor * down, ggml_tensor * act) {
            ggml_tensor * out = ggml_mul_mat_id(ctx, down, act, picked);
            if (expert_scale) out = ggml_mul(ctx, out, expert_scale);
            if (down == l.ffn_down_exps.pieces[0] && l.ffn_down_exps.first) {
                for (ggml_tensor * change : down_changes) out = ggml_add(ctx, out, change);
            }
            if (l.ffn_down_exps_b && down == l.ffn_down_exps.pieces[0]) {
                out = ggml_add_id(ctx, out, l.ffn_down_exps_b, picked);
            }
            out = ggml_mul(ctx, out, ggml_reshape_3d(ctx, weights, 1, K, T));  // [E, K, T]
            ggml_tensor * sum = ggml_view_2d(ctx, out, out->ne[0], T, out->nb[2], 0);
            for (int64_t k = 1; k < K; ++k) {
                sum = ggml_add(ctx, sum, ggml_view_2d(ctx, out, out->ne[0], T, out->nb[2], k * out->nb[1]));
            }
            return K == 1 ? ggml_cont(ctx, sum) : sum;
        };
        return row_parallel(l.ffn_down_exps, h, nullptr, experts);
    }

    // Layer il's FFN on the attention block's output x: dense, experts, or
    // both, each normed on its own before they are added (the router then
    // reads the layer's input, RMS-normed and scaled).
    ggml_tensor * ffn(int il, ggml_tensor * x) const {
        const FfnBlock & ffn = hp.block(il).ffn;
        const LayerWeights & l = w.layers[il];
        switch (ffn.kind) {
            case FfnBlock::Kind::Dense:
                return dense_ffn(ffn, l, norm(x, l.ffn_norm));
            case FfnBlock::Kind::Experts: {
                ggml_tensor * in = norm(x, l.ffn_norm);
                return moe_ffn(ffn, l, in, in);
            }
            case FfnBlock::Kind::DenseAndExperts:
                break;
        }
        ggml_tensor * dense = norm(dense_ffn(ffn, l, norm(x, l.ffn_norm)), l.ffn_post_norm_1);
        ggml_tensor * router_in =
            ggml_scale(ctx, ggml_rms_norm(ctx, x, hp.rms_eps), 1.0f / std::sqrt((float) hp.n_embd));
        router_in = ggml_mul(ctx, router_in, l.ffn_router_scale);
        ggml_tensor * experts = norm(moe_ffn(ffn, l, norm(x, l.ffn_pre_norm_2), router_in), l.ffn_post_norm_2);
        return ggml_add(ctx, dense, experts);
    }

    // The rows of a table split by vocabulary (token_embd) for the batch's
    // tokens. Under tensor parallelism each token's row comes from the one
    // rank whose slice holds it, the others add zeros: summed as doubles so
    // that no wire rounds it.
    ggml_tensor * lookup(ggml_tensor * table) const {
        if (!reduce) return ggml_get_rows(ctx, table, in.tokens);
        ggml_tensor * rows = ggml_mul(ctx, ggml_get_rows(ctx, table, in.embd_rows), in.embd_mask);
        return ggml_ext_exact_round(
            ctx, ggml_cluster_allreduce(ctx, ggml_ext_exact_sum(ctx, &rows, 1), reduce->fn_f64, reduce->user));
    }

    // Gemma 4's per-layer inputs [n_embd_per_layer, n_tokens, n_layer]: each
    // token's per-layer embedding plus the normed projection of its scaled
    // embedding x, as upstream computes them.
    ggml_tensor * per_layer_inputs(ggml_tensor * x) const {
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
    ggml_tensor * add_per_layer_input(int il, ggml_tensor * x, ggml_tensor * per_layer) const {
        const LayerWeights & l = w.layers[il];
        ggml_tensor * mine = ggml_view_2d(ctx, per_layer, per_layer->ne[0], per_layer->ne[1], per_layer->nb[1],
                                          (size_t) il * per_layer->nb[2]);
        ggml_tensor * cur = ggml_gelu(ctx, ggml_mul_mat(ctx, l.per_layer_gate, x));
        cur = ggml_mul_mat(ctx, l.per_layer_proj, ggml_mul(ctx, cur, mine));
        return ggml_add(ctx, x, norm(cur, l.per_layer_norm));
    }
};

}  // namespace

void build_key_shift_graph(ggml_context * ctx, ggml_cgraph * gf, const HParams & hp, const ModelWeights & w,
                           const KvCache & kv, KeyShift all, KeyShift window) {
    for (int il = 0; il < hp.n_layer_kv(); ++il) {
        const KeyShift & pool = kv.windowed(il) ? window : all;
        if (!pool.cells) continue;
        ggml_tensor *cells = pool.cells, *shift = pool.shift;
        const int64_t n = cells->ne[0];
        ggml_tensor * k = kv.k(il);
        // Gathered to F32 (any cache type), rotated, written back in the cache's type.
        ggml_tensor * rows = ggml_get_rows(ctx, k, cells);
        const int64_t hd = hp.layer(il).head_dim;
        rows = ggml_reshape_3d(ctx, rows, hd, k->ne[0] / hd, n);
        rows = rope_layer(ctx, rows, shift, hp, w, kv, il);
        ggml_build_forward_expand(gf, ggml_set_rows(ctx, k, ggml_reshape_2d(ctx, rows, k->ne[0], n), cells));
    }
}

ggml_tensor * build_decoder_graph(ggml_context * ctx, ggml_cgraph * gf, const HParams & hp, const ModelWeights & w,
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

    in.lora_scales.clear();
    for (size_t i = 0; i < w.lora_scales.size(); ++i) {
        in.lora_scales.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1, T));
        ggml_set_input(in.lora_scales.back());
    }
    Builder b{ctx,
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
    ggml_tensor * per_layer = hp.n_embd_per_layer > 0 ? b.per_layer_inputs(x) : nullptr;
    // Only the rows whose logits are wanted go on from the last layer's
    // attention, or after the final norm (HParams::rows_after_norm).
    const bool rows_at_end = hp.rows_after_norm;
    for (int il = 0; il < hp.n_layer; ++il) {
        const LayerWeights & l = w.layers[il];
        ggml_tensor * rows = il == hp.n_layer - 1 && !rows_at_end ? in.out_rows : nullptr;
        ggml_tensor * cur = b.attention(il, b.norm(x, l.attn_norm), rows);
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
    ggml_tensor * hidden = b.norm(x, w.output_norm);
    if (rows_at_end) hidden = ggml_get_rows(ctx, hidden, in.out_rows);
    ggml_tensor * out = embeddings ? hidden : b.project(w.output, hidden);
    if (!embeddings && hp.final_logit_softcap != 0.0f) {
        out = ggml_scale(ctx, out, 1.0f / hp.final_logit_softcap);
        out = ggml_scale(ctx, ggml_tanh(ctx, out), hp.final_logit_softcap);
    }
    ggml_set_output(out);
    ggml_build_forward_expand(gf, out);
    return out;
}

}  // namespace llama_tp
