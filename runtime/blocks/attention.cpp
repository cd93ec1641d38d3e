// Grouped-query attention: its weights and its graph. Q, K and V of the
// rank's heads (biases, norms, RoPE), the keys and values written to the
// layer's cache (or read from the layer it shares), attention over each
// run's cells, and the output projection summed over the group.
#include "runtime/error.h"
#include "runtime/graph/graph_builder.h"
#include "runtime/model/gguf_file.h"
#include "runtime/model/weight_declarer.h"
#include "runtime/shard/axis.h"

#include "ggml-ext/ops/row_attention.h"

#include <cmath>
#include <numeric>

#include "ggml.h"

namespace llama_tp {

// The attention block's weights: Q, K and V split by the rank's heads (their
// rows; a fused QKV matrix as the rank's rows of each part), the output
// projection by its input (row-parallel), and the block's biases, sinks and
// norms.
void declare_attention_weights(WeightDeclarer & d, int il, LayerWeights & l) {
    const HParams & hp = d.hp;
    const AttentionBlock & attn = hp.block(il).attention;
    const RankShard & shard = d.shard();
    const LayerShard & ls = d.layer(il);
    const std::string p = hp.tensor_prefix(il);
    const int64_t E = hp.n_embd, hd = hp.layer(il).head_dim;
    const int64_t Q = hp.n_embd_q(il), KV = hp.n_embd_kv(il);
    // With an output gate each head's queries are followed by its gate.
    const int64_t q_unit = attn.output_gate ? 2 * hd : hd;
    const TensorSlice q_rows = d.rows(shard.q_heads, q_unit), q_cols = d.cols(shard.q_heads, hd);
    const TensorSlice kv_rows = d.rows(ls.kv_heads, hd), kv_cols = d.cols(ls.kv_heads, hd);
    l.attn_norm = d.declare(p + "attn_norm.weight", {E}, false);
    const int64_t QG = attn.output_gate ? 2 * Q : Q;  // the queries' rows, gates included
    if (d.file.find_tensor(p + "attn_qkv.weight")) {
        // Fused (phi3, some qwen35): the rank's heads of each of Q, K and V,
        // stacked into one matrix as the file stacks the whole of them.
        l.wqkv = d.declare_rows(p + "attn_qkv.weight", {E, QG + 2 * KV},
                                {d.part(q_rows, 0, QG), d.part(kv_rows, QG, KV), d.part(kv_rows, QG + KV, KV)});
    } else {
        // Layers that share an earlier layer's cache project no keys or
        // values; the others may have no V where values are the keys'.
        const bool own_kv = il < hp.n_layer_kv();
        l.wq = d.declare(p + "attn_q.weight", {E, QG}, true, q_rows);
        if (own_kv) l.wk = d.declare(p + "attn_k.weight", {E, KV}, true, kv_rows);
        if (own_kv) l.wv = d.declare(p + "attn_v.weight", {E, KV}, true, kv_rows, !attn.values_optional);
    }
    l.wo = d.row_parallel(p + "attn_output.weight", {Q, E}, shard.o_pieces, hd, false);
    if (attn.qkv_bias) {
        // A bias is one row: its slice is a column range.
        l.bq = d.declare(p + "attn_q.bias", {Q}, false, q_cols);
        l.bk = d.declare(p + "attn_k.bias", {KV}, false, kv_cols);
        l.bv = d.declare(p + "attn_v.bias", {KV}, false, kv_cols);
    }
    if (attn.sinks) {
        l.bo = d.declare(p + "attn_output.bias", {E}, false);
        l.attn_sinks = d.declare(p + "attn_sinks.weight", {hp.n_head}, false, d.cols(shard.q_heads, 1));
    }
    if (attn.qk_norm) {
        l.q_norm = d.declare(p + "attn_q_norm.weight", {hd}, false);
        if (l.wk || l.wqkv) l.k_norm = d.declare(p + "attn_k_norm.weight", {hd}, false);
    }
    if (attn.post_norm) l.attn_post_norm = d.declare(p + "post_attention_norm.weight", {E}, false);
}

// Writes this batch's keys or values ([head_dim, heads, tokens], the
// heads of a token contiguous) into layer il's cache, in its pool's cells.
// Views of the cache are taken of the write's result so that they order
// after it.
ggml_tensor * GraphBuilder::store(int il, ggml_tensor * cache, ggml_tensor * cur) const {
    return ggml_set_rows(ctx, cache, ggml_view_2d(ctx, cur, cache->ne[0], shape.n_tokens, cur->nb[2], 0),
                         kv.windowed(il) ? in.kv_cells_swa : in.kv_cells);
}

GraphBuilder::Qkv GraphBuilder::project_qkv(int il, ggml_tensor * cur) const {
    const LayerWeights & l = w.layers[il];
    const int64_t hd = head_dim(il), nq = n_q(il), nkv = n_kv(il);
    if (!l.wqkv) {
        // Without a V matrix (Gemma 4's global layers) the values are the keys' projection.
        ggml_tensor * k = project_heads(cur, l.wk, l.bk, hd, nkv);
        const int64_t q_width = hp.block(il).attention.output_gate ? 2 * hd : hd;
        return {project_heads(cur, l.wq, l.bq, q_width, nq), k, l.wv ? project_heads(cur, l.wv, l.bv, hd, nkv) : k};
    }
    ggml_tensor * qkv = project(l.wqkv, cur);
    const size_t head = ggml_row_size(qkv->type, hd);
    // With an output gate a query head is twice as wide (its gate after it).
    const int64_t q_width = hp.block(il).attention.output_gate ? 2 : 1;
    auto heads = [&](int64_t width, int64_t n, int64_t first) {
        return ggml_view_3d(ctx, qkv, width * hd, n, shape.n_tokens, width * head, qkv->nb[1], first * head);
    };
    return {heads(q_width, nq, 0), heads(1, nkv, q_width * nq), heads(1, nkv, q_width * nq + nkv)};
}

// Each stream's cells of a stored cache of heads `head` values apart:
// [width, window, n_kv, n_streams], the first width values of each head
// (latent attention's values are the first kv_rank of its key row).
ggml_tensor * GraphBuilder::cache_view(int il, ggml_tensor * stored, const AttentionRun & run, int64_t width,
                                       int64_t head) const {
    const size_t cell = stored->nb[1];
    return ggml_view_4d(ctx, stored, width, run.window, n_kv(il), run.n_streams, cell,
                        ggml_row_size(stored->type, head), (size_t) run.stride * cell, (size_t) run.cell0 * cell);
}

// Scores are scaled by 1/sqrt(head size), by 1 where the queries were
// scaled (HParams::query_scale), or as latent attention scales them.
float GraphBuilder::attention_scale(int il) const {
    if (hp.block(il).attention.kind == AttentionBlock::Kind::MultiHeadLatent) return latent_attention_scale(hp);
    return hp.query_scale != 0.0f ? 1.0f : 1.0f / std::sqrt((float) head_dim(il));
}

// Attention of one run's queries (of q [head_dim, n_q, n_tokens]) over
// their streams' cells: [head_dim, n_q, run.size()]. With per-sequence
// regions every row goes through ggml-ext's row attention, so a position
// gets the same numbers in a prompt, as a decode token or after a cached
// prefix; the shared pool keeps ggml's kernel, identical to upstream.
ggml_tensor * GraphBuilder::attend(int il, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, const AttentionRun & run,
                                   ggml_tensor * kq_mask, size_t mask_offset) const {
    const int64_t hd = head_dim(il), nq = n_q(il);
    // The values' width, and how far apart their heads are in v.
    const bool in_keys = hp.block(il).attention.values_in_keys();
    const int64_t dv = in_keys ? hp.mla.kv_rank : hp.layer(il).v_dim(), v_head = in_keys ? hd : dv;
    ggml_tensor * sinks = w.layers[il].attn_sinks;
    ggml_tensor * qr = ggml_view_4d(ctx, q, hd, nq, run.n_tokens, run.n_streams, q->nb[1], q->nb[2],
                                    (size_t) run.n_tokens * q->nb[2], (size_t) run.t0 * q->nb[2]);
    const size_t row = (size_t) run.window * sizeof(ggml_fp16_t);
    ggml_tensor * mask = ggml_view_4d(ctx, kq_mask, run.window, run.n_tokens, 1, run.n_streams, row, row * run.n_tokens,
                                      row * run.n_tokens, mask_offset * sizeof(ggml_fp16_t));
    ggml_tensor * qp = ggml_permute(ctx, qr, 0, 2, 1, 3);
    const float scale = attention_scale(il);
    ggml_tensor * out = nullptr;
    // Row attention reads F16 caches only, on the CPU, values as wide as keys.
    if (row_attention && !kv.all().unified() && kv.types().both_f16() && dv == hd) {
        out = ggml_ext_row_attention(ctx, qp, cache_view(il, k, run, hd, hd), cache_view(il, v, run, dv, v_head), mask,
                                     sinks, scale, hp.attn_logit_softcap);
    } else {
        out = ggml_flash_attn_ext(ctx, qp, cache_view(il, k, run, hd, hd), cache_view(il, v, run, dv, v_head), mask,
                                  scale, 0.0f, hp.attn_logit_softcap);
        ggml_prec_set_acc(out, GGML_PREC_F32);
        if (sinks) ggml_flash_attn_ext_add_sinks(out, sinks);
    }
    return ggml_reshape_3d(ctx, out, dv, nq, run.size());
}

// Self-attention, projected back to n_embd and summed over the group
// (rows: see row_parallel). Each rank computes its heads; each run attends
// only over its own cells; the runs' results are joined in token order.
ggml_tensor * GraphBuilder::attention(int il, ggml_tensor * cur, ggml_tensor * rows) {
    const LayerWeights & l = w.layers[il];
    ggml_tensor * q = nullptr;
    ggml_tensor * gate = nullptr;
    if (il < hp.n_layer_kv()) {
        auto [qp, k, v] = project_qkv(il, cur);
        q = qp;
        if (hp.block(il).attention.output_gate) {
            // [2 head_dim, heads, T]: each head's queries, then its gate.
            const int64_t hd = head_dim(il);
            gate = ggml_cont(
                ctx, ggml_view_3d(ctx, q, hd, q->ne[1], q->ne[2], q->nb[1], q->nb[2], ggml_row_size(q->type, hd)));
            q = ggml_view_3d(ctx, q, hd, q->ne[1], q->ne[2], q->nb[1], q->nb[2], 0);
        }
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
    ggml_tensor * attn = attend_runs(il, q, k_stored, v_stored);
    if (gate) attn = ggml_mul(ctx, attn, ggml_sigmoid(ctx, gate));
    ggml_tensor * out = project(l.wo, ggml_reshape_2d(ctx, attn, head_dim(il) * n_q(il), shape.n_tokens), rows);
    return l.bo ? ggml_add(ctx, out, l.bo) : out;
}

ggml_tensor * GraphBuilder::attend_runs(int il, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v) const {
    const bool swa = hp.is_swa(il);
    ggml_tensor * attn = nullptr;
    size_t mask_offset = 0;
    for (const AttentionRun & run : swa ? shape.swa_runs() : shape.runs) {
        ggml_tensor * part = attend(il, q, k, v, run, swa ? in.kq_mask_swa : in.kq_mask, mask_offset);
        attn = attn ? ggml_concat(ctx, attn, part, 2) : part;
        mask_offset += (size_t) run.window * run.size();
    }
    return attn;
}

// Its shard units.
Axis attention_head_axis(const GgufFile & file, const HParams & hp, int64_t n_ranks) {
    // Column slices of attn_output start at head boundaries, which must also
    // be quantization-block boundaries; a rank holds whole KV groups of every
    // layer whose KV heads go round.
    int64_t unit = 1;
    for (int il = 0; il < hp.n_layer; ++il) {
        if (!hp.keeps_kv(il)) continue;
        const LayerShape & s = hp.layer(il);
        const int64_t blk_o = block_of(file, hp.tensor_prefix(il) + "attn_output.weight");
        const int64_t heads_per_block = blk_o / std::gcd(blk_o, (int64_t) hp.out_head_dim(il));
        const int64_t group = hp.n_head / s.n_head_kv;
        unit = std::lcm(unit, std::lcm(s.n_head_kv >= n_ranks ? group : 1, heads_per_block));
    }
    return {hp.n_head, unit,
            "attention heads (" + std::to_string(hp.n_head) + " heads in units of " + std::to_string(unit) +
                " for blk.*.attn_q.weight / attn_output.weight)"};
}

// Attention maps local query head i to local KV head i / (local ratio):
// right when the rank holds whole groups, or part of a single group.
ShardRange attention_kv_heads(const HParams & hp, int il, const ShardRange & q, int rank, int n_ranks) {
    const int64_t n_head_kv = hp.layer(il).n_head_kv, group = hp.n_head / n_head_kv;
    const ShardRange kv{q.begin / group, (q.end + group - 1) / group};
    const bool whole_groups = q.begin % group == 0 && q.size() == kv.size() * group;
    if (kv.size() != 1 && !whole_groups) {
        throw Error("cannot split attention across " + std::to_string(n_ranks) + " ranks: rank " +
                    std::to_string(rank) + " would hold query heads [" + std::to_string(q.begin) + ", " +
                    std::to_string(q.end) + ") that do not map evenly onto KV heads (" + std::to_string(hp.n_head) +
                    " query heads, " + std::to_string(n_head_kv) + " KV heads in layer " + std::to_string(il) +
                    "); choose a tensor-parallel degree that divides " + std::to_string(n_head_kv) + " or " +
                    std::to_string(hp.n_head));
    }
    return kv;
}

}  // namespace llama_tp
