#pragma once
// What a rank's graph is built with (the model, its weights and cache, the
// batch's shape and inputs, how sums are made) and the operations every
// block's graph shares: products with their LoRA changes, row-parallel
// products summed over the group, norms, RoPE. Each block kind builds its
// graph in its own file (runtime/blocks/), the decoder the rest
// (decoder_graph.cpp).

#include "ggml-ext/ops/collective.h"
#include "ggml-ext/ops/exact_matmul.h"
#include "ggml-ext/ops/exact_sum.h"
#include "runtime/blocks/blocks.h"
#include "runtime/graph/decoder_graph.h"
#include "runtime/kv/kv_cache.h"
#include "runtime/model/hparams.h"
#include "runtime/model/weights.h"
#include "runtime/shard/shard_plan.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "ggml.h"

namespace llama_tp {

// RoPE of layer il at the given positions (a forward pass's, or a shift's):
// sliding-window layers rotate with their own base and frequency scale, and
// some (AttentionBlock::rope_factors) without the model's frequency factors.
ggml_tensor * rope_layer(ggml_context * ctx, ggml_tensor * x, ggml_tensor * positions, const HParams & hp,
                         const ModelWeights & w, const KvCache & kv, int il);

// Latent attention's score scale (runtime/blocks/latent_attention.cpp).
float latent_attention_scale(const HParams & hp);

struct GraphBuilder {
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
    int64_t n_q(int) const { return w.shard().q_heads.size(); }
    int64_t n_kv(int il) const { return w.shard().layers[il].kv_heads.size(); }

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
        std::vector<ggml_tensor *> parts = cell_products(weight, x, product);
        ggml_tensor * sum = exact_total(ggml_ext_exact_sum(ctx, parts.data(), (int) parts.size()));
        return rows ? ggml_get_rows(ctx, sum, rows) : sum;
    }
    // Two row-parallel products summed over the group with one reduction
    // (routed experts beside a shared expert): with float sums the rank's
    // two partial results are added before it, with split-invariant sums
    // every cell of both goes into one exact sum. Neither may be one pass
    // (its double sums take no product of the caller's).
    template <typename ProductA, typename ProductB>
    ggml_tensor * row_parallel_pair(const RowParallelWeight & a, ggml_tensor * xa, const ProductA & pa,
                                    const RowParallelWeight & b, ggml_tensor * xb, const ProductB & pb) const {
        if (!exact) return all_reduce(ggml_add(ctx, pa(a.pieces[0], xa), pb(b.pieces[0], xb)));
        GGML_ASSERT(!a.one_pass && !b.one_pass);
        std::vector<ggml_tensor *> parts = cell_products(a, xa, pa);
        for (ggml_tensor * part : cell_products(b, xb, pb)) parts.push_back(part);
        return exact_total(ggml_ext_exact_sum(ctx, parts.data(), (int) parts.size()));
    }
    // product(cell, its columns of x) for every cell of a row-parallel matrix.
    template <typename Product>
    std::vector<ggml_tensor *> cell_products(const RowParallelWeight & weight, ggml_tensor * x,
                                             const Product & product) const {
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
        return parts;
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
    // gate, when given, scales each change (a gated shared expert's).
    ggml_tensor * with_lora(ggml_tensor * y, const ggml_tensor * base, bool row_parallel_base, ggml_tensor * x,
                            ggml_tensor * rows, ggml_tensor * gate = nullptr) const {
        for (size_t a = 0; a < w.loras.size(); ++a) {
            const LoraWeight * lw = (shape.lora_active >> a) & 1 ? w.lora(a, base) : nullptr;
            if (!lw) continue;
            ggml_tensor * t =
                row_parallel_base ? row_parallel(lw->a, x, rows, matmul()) : ggml_mul_mat(ctx, lw->a.pieces.front(), x);
            ggml_tensor * change = ggml_mul(ctx, ggml_mul_mat(ctx, lw->b, t), lora_scale(lw->scale, y->ne[1]));
            y = ggml_add(ctx, y, gate ? ggml_mul(ctx, change, gate) : change);
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
        if (reduce) acc = ggml_cluster_allreduce(ctx, acc, reduce->fn, reduce->user);
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

    // Grouped-query attention (runtime/blocks/attention.cpp).
    // Writes this batch's keys or values ([head_dim, heads, tokens], the
    // heads of a token contiguous) into layer il's cache, in its pool's cells.
    // Views of the cache are taken of the write's result so that they order
    // after it.
    ggml_tensor * store(int il, ggml_tensor * cache, ggml_tensor * cur) const;

    // Q, K and V of the rank's heads: [head_dim, heads, tokens] each, from
    // three products or views of one (a fused matrix).
    struct Qkv {
        ggml_tensor *q, *k, *v;
    };

    Qkv project_qkv(int il, ggml_tensor * cur) const;

    // Each stream's cells of a stored cache of heads `head` values apart:
    // [width, window, n_kv, n_streams].
    ggml_tensor * cache_view(int il, ggml_tensor * stored, const AttentionRun & run, int64_t width, int64_t head) const;
    // What layer il's scores are scaled by.
    float attention_scale(int il) const;

    // Attention of one run's queries (of q [head_dim, n_q, n_tokens]) over
    // their streams' cells: [head_dim, n_q, run.size()]. With per-sequence
    // regions every row goes through ggml-ext's row attention, so a position
    // gets the same numbers in a prompt, as a decode token or after a cached
    // prefix; the shared pool keeps ggml's kernel, identical to upstream.
    ggml_tensor * attend(int il, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, const AttentionRun & run,
                         ggml_tensor * kq_mask, size_t mask_offset) const;
    // attend over every run of layer il (its window's runs and mask where it
    // slides), the results joined in token order: [value width, n_q, n_tokens].
    ggml_tensor * attend_runs(int il, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v) const;

    // Self-attention, projected back to n_embd and summed over the group
    // (rows: see row_parallel). Each rank computes its heads; each run attends
    // only over its own cells; the runs' results are joined in token order.
    ggml_tensor * attention(int il, ggml_tensor * cur, ggml_tensor * rows);

    // Latent attention (runtime/blocks/latent_attention.cpp), as attention:
    // its cache is the latent, its values the latent's first kv_rank values.
    ggml_tensor * latent_attention(int il, ggml_tensor * cur, ggml_tensor * rows);
    // Its expanded form (files with attn_kv_b): q [head_k, heads, T] with its
    // rotated part, the normed latent [kv_rank, T], the rotated key part
    // [n_rot, 1, T].
    ggml_tensor * expanded_latent_attention(int il, ggml_tensor * q, ggml_tensor * latent, ggml_tensor * k_pe,
                                            ggml_tensor * rows);

    // Linear attention (runtime/blocks/delta_net.cpp).
    // The batch's projections: the convolution's input [channels, T], the
    // output gate z [value dim, T], the update strength and the decay's log
    // [value heads, T].
    struct DeltaProjections {
        ggml_tensor *qkv, *z, *beta, *decay;
    };
    DeltaProjections delta_projections(int il, ggml_tensor * cur) const;
    ggml_tensor * delta_run(int il, const DeltaProjections & p, const StateRun & run) const;
    ggml_tensor * delta_net(int il, ggml_tensor * cur, ggml_tensor * rows);

    // The feed-forward blocks: dense, experts, both (runtime/blocks/ffn.cpp).
    // The gate's activation times up (FfnBlock::Gate).
    ggml_tensor * gated(const FfnBlock & ffn, ggml_tensor * gate, ggml_tensor * up) const;

    // The dense gated FFN, each rank computing its slice of the width,
    // summed over the group; dense_hidden: its slice before the down
    // projection.
    ggml_tensor * dense_hidden(const FfnBlock & ffn, const LayerWeights & l, ggml_tensor * cur) const;
    ggml_tensor * dense_ffn(const FfnBlock & ffn, const LayerWeights & l, ggml_tensor * cur) const;

    // Mixture of experts: the router is mirrored, so every rank picks the same
    // experts; each rank runs its slice of every picked expert's width and
    // weights it, and the routed experts are summed before the one reduction
    // over the group.
    // router_in: what the router reads (Gemma 4: the layer's input, RMS-normed
    // and scaled by 1/sqrt(n_embd) and a weight; else cur). shared: a shared
    // expert's hidden slice and its gate per token [1, T], whose down
    // projection is summed with the experts' in the same reduction.
    struct SharedExpert {
        ggml_tensor *hidden, *gate;
    };
    ggml_tensor * moe_ffn(const FfnBlock & ffn, const LayerWeights & l, ggml_tensor * cur, ggml_tensor * router_in,
                          const SharedExpert * shared = nullptr) const;
    // The router's selection scores [n_expert, T] with every expert outside
    // the best n_group_used groups at -inf (group-limited routing).
    ggml_tensor * best_groups_only(ggml_tensor * selection) const;

    // Layer il's FFN on the attention block's output x: dense, experts, or
    // both, each normed on its own before they are added (the router then
    // reads the layer's input, RMS-normed and scaled).
    ggml_tensor * ffn(int il, ggml_tensor * x) const;

    // The decoder's embeddings (decoder_graph.cpp).
    // The rows of a table split by vocabulary (token_embd) for the batch's
    // tokens. Under tensor parallelism each token's row comes from the one
    // rank whose slice holds it, the others add zeros: summed as doubles so
    // that no wire rounds it.
    ggml_tensor * lookup(ggml_tensor * table) const;

    // Gemma 4's per-layer inputs [n_embd_per_layer, n_tokens, n_layer]: each
    // token's per-layer embedding plus the normed projection of its scaled
    // embedding x, as upstream computes them.
    ggml_tensor * per_layer_inputs(ggml_tensor * x) const;

    // x plus layer il's per-layer input gated by x and projected back, normed
    // (every rank alike: the weights are mirrored).
    ggml_tensor * add_per_layer_input(int il, ggml_tensor * x, ggml_tensor * per_layer) const;
};

}  // namespace llama_tp
