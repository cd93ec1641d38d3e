// The feed-forward blocks: their weights and their graphs. A dense gated FFN
// over the rank's slice of its width, routed experts over the rank's slice
// of every expert's width (the router mirrored, the experts summed before
// the one reduction), or both (normed apart, then added).
#include "runtime/graph/graph_builder.h"
#include "runtime/model/gguf_file.h"
#include "runtime/model/weight_declarer.h"
#include "runtime/shard/axis.h"

#include <cmath>
#include <numeric>

#include "ggml.h"

namespace llama_tp {

// The feed-forward block's weights: gate and up split by the rank's width
// (their rows; a fused gate/up matrix as the rank's rows of each half), down
// by its input (row-parallel); every expert's alike, the router mirrored;
// the block's norms, biases and scales.
void declare_ffn_weights(WeightDeclarer & d, int il, LayerWeights & l) {
    const HParams & hp = d.hp;
    const FfnBlock & ffn = hp.block(il).ffn;
    const LayerShard & ls = d.layer(il);
    const std::string p = hp.tensor_prefix(il);
    const int64_t E = hp.n_embd, F = hp.layer(il).n_ff;
    l.ffn_norm = d.declare(p + ffn.input_norm + ".weight", {E}, false);
    if (ffn.post_norm) l.ffn_post_norm = d.declare(p + "post_ffw_norm.weight", {E}, false);
    if (ffn.has_experts()) {
        const int64_t X = hp.n_expert, FX = hp.n_ff_exp;
        const TensorSlice fx_rows = d.rows(ls.ff_exp.width, 1);
        const TensorSlice fx_cols = d.cols(ls.ff_exp.width, 1);
        l.ffn_router = d.declare(p + "ffn_gate_inp.weight", {E, X}, false);
        if (ffn.selection_bias) l.ffn_exp_probs_b = d.declare(p + "exp_probs_b.bias", {X}, false);
        if (d.file.find_tensor(p + "ffn_gate_up_exps.weight")) {
            l.ffn_gate_up_exps = d.declare_rows(p + "ffn_gate_up_exps.weight", {E, 2 * FX, X},
                                                {d.part(fx_rows, 0, FX), d.part(fx_rows, FX, FX)});
        } else {
            l.ffn_gate_exps = d.declare(p + "ffn_gate_exps.weight", {E, FX, X}, true, fx_rows);
            l.ffn_up_exps = d.declare(p + "ffn_up_exps.weight", {E, FX, X}, true, fx_rows);
        }
        l.ffn_down_exps = d.row_parallel(p + "ffn_down_exps.weight", {FX, E, X}, ls.ff_exp.pieces, 1, true);
        if (ffn.expert_biases) {
            l.ffn_router_b = d.declare(p + "ffn_gate_inp.bias", {X}, false);
            l.ffn_gate_exps_b = d.declare(p + "ffn_gate_exps.bias", {FX, X}, false, fx_cols);
            l.ffn_up_exps_b = d.declare(p + "ffn_up_exps.bias", {FX, X}, false, fx_cols);
            // Added once: by the rank holding the first cell of the width.
            if (ls.ff_exp.width.begin == 0) {
                l.ffn_down_exps_b = d.declare(p + "ffn_down_exps.bias", {E, X}, false);
            }
        }
        if (ffn.expert_scales) {
            l.ffn_router_scale = d.declare(p + "ffn_gate_inp.scale", {E}, false);
            l.ffn_down_exps_scale = d.declare(p + "ffn_down_exps.scale", {X}, false, {}, /*required =*/false);
            l.ffn_post_norm_1 = d.declare(p + "post_ffw_norm_1.weight", {E}, false);
            l.ffn_pre_norm_2 = d.declare(p + "pre_ffw_norm_2.weight", {E}, false);
            l.ffn_post_norm_2 = d.declare(p + "post_ffw_norm_2.weight", {E}, false);
        }
    }
    if (!ffn.has_dense()) return;
    const TensorSlice ff_rows = d.rows(ls.ff.width, 1);
    const std::string s = std::string(ffn.dense_suffix()) + ".weight";
    if (ffn.fused_gate_up) {
        // Fused gate and up (gate first): the rank's width of each, stacked.
        l.ffn_gate_up = d.declare_rows(p + "ffn_up.weight", {E, 2 * F}, {d.part(ff_rows, 0, F), d.part(ff_rows, F, F)});
    } else {
        l.ffn_gate = d.declare(p + "ffn_gate" + s, {E, F}, true, ff_rows);
        l.ffn_up = d.declare(p + "ffn_up" + s, {E, F}, true, ff_rows);
    }
    l.ffn_down = d.row_parallel(p + "ffn_down" + s, {F, E}, ls.ff.pieces, 1, false);
    // The shared expert's gate: one logit per token, mirrored.
    if (ffn.kind == FfnBlock::Kind::ExpertsAndShared && ffn.shared_gate)
        l.ffn_shared_gate = d.declare(p + "ffn_gate_inp_shexp.weight", {E}, false);
}

// The gate's activation times up (FfnBlock::Gate).
ggml_tensor * GraphBuilder::gated(const FfnBlock & ffn, ggml_tensor * gate, ggml_tensor * up) const {
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
ggml_tensor * GraphBuilder::dense_hidden(const FfnBlock & ffn, const LayerWeights & l, ggml_tensor * cur) const {
    if (l.ffn_gate_up) return ggml_swiglu(ctx, project(l.ffn_gate_up, cur));  // the gate half, then the up half
    ggml_tensor * gate = project(l.ffn_gate, cur);
    ggml_tensor * up = project(l.ffn_up, cur);
    return gated(ffn, gate, up);
}

ggml_tensor * GraphBuilder::dense_ffn(const FfnBlock & ffn, const LayerWeights & l, ggml_tensor * cur) const {
    return project(l.ffn_down, dense_hidden(ffn, l, cur), nullptr);
}

// Group-limited routing (DeepSeek V3), as upstream computes it: each group
// scored by the sum of its two best selection scores, every expert outside
// the best n_group_used groups set to -inf so that none of them is picked.
ggml_tensor * GraphBuilder::best_groups_only(ggml_tensor * selection) const {
    const int64_t T = selection->ne[1], G = hp.n_expert_groups, per_group = hp.n_expert / G;
    ggml_tensor * groups = ggml_reshape_3d(ctx, selection, per_group, G, T);
    ggml_tensor * best_two = ggml_argsort_top_k(ctx, groups, 2);  // [2, G, T]
    ggml_tensor * scores = ggml_get_rows(ctx, ggml_reshape_4d(ctx, groups, 1, per_group, G, T), best_two);
    scores = ggml_sum_rows(ctx, ggml_reshape_3d(ctx, scores, 2, G, T));  // [1, G, T]
    ggml_tensor * kept = ggml_argsort_top_k(ctx, ggml_reshape_2d(ctx, scores, G, T), hp.n_group_used);
    ggml_tensor * masked =
        ggml_set_rows(ctx, ggml_fill(ctx, groups, -INFINITY), ggml_get_rows(ctx, groups, kept), kept);
    return ggml_reshape_2d(ctx, masked, hp.n_expert, T);
}

// Mixture of experts: the router is mirrored, so every rank picks the same
// experts; each rank runs its slice of every picked expert's width and
// weights it, and the routed experts are summed before the one reduction
// over the group.
// router_in: what the router reads (Gemma 4: the layer's input, RMS-normed
// and scaled by 1/sqrt(n_embd) and a weight; else cur).
ggml_tensor * GraphBuilder::moe_ffn(const FfnBlock & ffn, const LayerWeights & l, ggml_tensor * cur,
                                    ggml_tensor * router_in, const SharedExpert * shared) const {
    const int64_t T = cur->ne[1], K = hp.n_expert_used;
    ggml_tensor * logits = ggml_mul_mat(ctx, l.ffn_router, router_in);  // [n_expert, T]
    if (l.ffn_router_b) logits = ggml_add(ctx, logits, l.ffn_router_b);
    ggml_tensor * probs = logits;
    if (ffn.routing == FfnBlock::Routing::Softmax) probs = ggml_soft_max(ctx, logits);
    if (ffn.routing == FfnBlock::Routing::Sigmoid) probs = ggml_sigmoid(ctx, logits);
    // The selection bias moves which experts are picked, not their weights.
    ggml_tensor * selection = l.ffn_exp_probs_b ? ggml_add(ctx, probs, l.ffn_exp_probs_b) : probs;
    if (hp.n_expert_groups > 1) selection = best_groups_only(selection);
    ggml_tensor * picked = ggml_argsort_top_k(ctx, selection, (int) K);  // [K, T]
    ggml_tensor * weights = ggml_get_rows(ctx, ggml_reshape_3d(ctx, probs, 1, hp.n_expert, T), picked);
    weights = ggml_reshape_2d(ctx, weights, K, T);
    if (ffn.routing == FfnBlock::Routing::SoftmaxOfPicked) weights = ggml_soft_max(ctx, weights);
    if (ffn.normalize_weights) {
        // The sum kept above the smallest normal F16, as upstream keeps it:
        // sigmoid weights may all be near 0.
        ggml_tensor * sum = ggml_clamp(ctx, ggml_sum_rows(ctx, weights), 6.103515625e-5f, INFINITY);
        weights = ggml_div(ctx, weights, sum);
    }
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
    if (!shared) return row_parallel(l.ffn_down_exps, h, nullptr, experts);
    // The shared expert's down projection, gated per token as upstream
    // gates it: each rank's part (each cell) scaled by the same gate.
    auto gated_down = [&](ggml_tensor * down, ggml_tensor * act) {
        ggml_tensor * out = ggml_mul_mat(ctx, down, act);
        return shared->gate ? ggml_mul(ctx, out, shared->gate) : out;
    };
    ggml_tensor * sum = row_parallel_pair(l.ffn_down_exps, h, experts, l.ffn_down, shared->hidden, gated_down);
    // Adapters of the shared down projection: their change gated as well.
    return with_lora(sum, l.ffn_down.pieces.front(), true, shared->hidden, nullptr, shared->gate);
}

// Layer il's FFN on the attention block's output x: dense, experts, or
// both, each normed on its own before they are added (the router then
// reads the layer's input, RMS-normed and scaled).
ggml_tensor * GraphBuilder::ffn(int il, ggml_tensor * x) const {
    const FfnBlock & ffn = hp.block(il).ffn;
    const LayerWeights & l = w.layers[il];
    switch (ffn.kind) {
        case FfnBlock::Kind::Dense:
            return dense_ffn(ffn, l, norm(x, l.ffn_norm));
        case FfnBlock::Kind::Experts: {
            ggml_tensor * in = norm(x, l.ffn_norm);
            return moe_ffn(ffn, l, in, in);
        }
        case FfnBlock::Kind::ExpertsAndShared: {
            // One reduction for both, but where the shared expert's down
            // projection is one pass with split-invariant sums: its double
            // sums take no gate, which then scales its total.
            ggml_tensor * in = norm(x, l.ffn_norm);
            ggml_tensor * gate =
                l.ffn_shared_gate ? ggml_sigmoid(ctx, ggml_mul_mat(ctx, l.ffn_shared_gate, in)) : nullptr;  // [1, T]
            const SharedExpert shared{dense_hidden(ffn, l, in), gate};
            if (exact && l.ffn_down.one_pass) {
                ggml_tensor * down = project(l.ffn_down, shared.hidden, nullptr);
                return ggml_add(ctx, moe_ffn(ffn, l, in, in), gate ? ggml_mul(ctx, down, gate) : down);
            }
            return moe_ffn(ffn, l, in, in, &shared);
        }
        case FfnBlock::Kind::DenseAndExperts:
            break;
    }
    ggml_tensor * dense = norm(dense_ffn(ffn, l, norm(x, l.ffn_norm)), l.ffn_post_norm_1);
    ggml_tensor * router_in = ggml_scale(ctx, ggml_rms_norm(ctx, x, hp.rms_eps), 1.0f / std::sqrt((float) hp.n_embd));
    router_in = ggml_mul(ctx, router_in, l.ffn_router_scale);
    ggml_tensor * experts = norm(moe_ffn(ffn, l, norm(x, l.ffn_pre_norm_2), router_in), l.ffn_post_norm_2);
    return ggml_add(ctx, dense, experts);
}

// Its shard units: slices of whole 16-row tiles where the width allows
// (quantization blocks are already), so that ggml's kernels treat a slice of
// gate/up as they treat the whole matrix, which split-invariant sums rely on.
Axis ffn_width_axis(const GgufFile & file, const HParams & hp, int64_t width, const std::string & down, int64_t n_ranks,
                    const std::function<bool(int)> & layers) {
    const int64_t blk = block_of_layers(file, hp, down, layers), tiled = std::lcm(blk, ShardPlan::kRowTile);
    const int64_t unit = width % tiled == 0 && width / tiled >= n_ranks ? tiled : blk;
    return {width, unit,
            "the FFN width (" + std::to_string(width) + " in blocks of " + std::to_string(unit) + " for blk.*." + down +
                ")"};
}

}  // namespace llama_tp
