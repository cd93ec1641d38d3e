// Linear attention (Gated DeltaNet: qwen35, qwen3next): its weights, its
// graph and its shard units. Each rank holds whole key heads and the value
// heads that read them: their channels of the convolution's input and taps
// (within each of the q, k and v segments, never across), their output gate,
// decay and update strength, and their columns of the output projection
// (row-parallel, one reduction). Value head j reads key head j % n_k_heads
// in qwen35's files (a rank's value heads are one range per multiple of
// n_k_heads) and j / ratio in qwen3next's (one range). Per sequence it keeps
// the convolution's last inputs and the delta-rule state of its heads
// (KvCache::conv_state, delta_state; sized by delta_net_state below), read
// and written by every step;
// sequences of as many tokens each go through in one operation.
#include "runtime/graph/graph_builder.h"
#include "runtime/kv/layer_state.h"
#include "runtime/model/gguf_file.h"
#include "runtime/model/weight_declarer.h"
#include "runtime/shard/axis.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ggml.h"

namespace llama_tp {

Axis delta_net_head_axis(const GgufFile & file, const HParams & hp) {
    const DeltaNetShape & s = hp.delta;
    // A key-head boundary is a value-head boundary in every block of
    // ssm_out's columns: whole quantization blocks there.
    const int64_t blk = block_of_layers(file, hp, "ssm_out.weight", [&](int il) { return !hp.keeps_kv(il); });
    const int64_t columns_per_head = (int64_t) s.head_v_dim * (s.grouped ? s.ratio() : 1);
    const int64_t unit = blk / std::gcd(blk, columns_per_head);
    const std::string what = "linear attention key heads (" + std::to_string(s.n_k_heads) + " heads in units of ";
    // Each later block of value heads starts n_k_heads heads on: off a
    // quantization block, no rank's columns of it could be read.
    if (s.value_blocks() > 1 && s.n_k_heads * (int64_t) s.head_v_dim % blk != 0) {
        return {s.n_k_heads, s.n_k_heads,
                what + std::to_string(s.n_k_heads) + ": ssm_out's blocks of value heads start at multiples of " +
                    std::to_string(s.n_k_heads * (int64_t) s.head_v_dim) + " columns, not of its quantization block " +
                    std::to_string(blk) + ")"};
    }
    const char * input = s.fused_qkvz ? "ssm_in" : "attn_qkv";
    return {s.n_k_heads, unit, what + std::to_string(unit) + " for blk.*." + input + ".weight / ssm_out.weight)"};
}

std::vector<ShardRange> delta_net_value_heads(const DeltaNetShape & d, const ShardRange & k) {
    if (d.grouped) return {{k.begin * d.ratio(), k.end * d.ratio()}};
    std::vector<ShardRange> v;
    for (int64_t b = 0; b < d.ratio(); ++b) v.push_back({b * d.n_k_heads + k.begin, b * d.n_k_heads + k.end});
    return v;
}

std::vector<ShardRange> delta_net_channels(const DeltaNetShape & s, const ShardRange & k) {
    std::vector<ShardRange> channels = {{k.begin * s.head_k_dim, k.end * s.head_k_dim},
                                        {s.key_dim() + k.begin * s.head_k_dim, s.key_dim() + k.end * s.head_k_dim}};
    for (const ShardRange & v : delta_net_value_heads(s, k)) {
        channels.push_back({2 * s.key_dim() + v.begin * s.head_v_dim, 2 * s.key_dim() + v.end * s.head_v_dim});
    }
    return channels;
}

DeltaNetState delta_net_state(const DeltaNetShape & d, int64_t k_heads) {
    DeltaNetState s;
    s.per_channel = std::max(0, d.conv_kernel - 1);
    s.per_value_head = (int64_t) d.head_v_dim * d.head_v_dim;
    s.channels = k_heads * (2 * (int64_t) d.head_k_dim + (int64_t) d.ratio() * d.head_v_dim);
    s.value_heads = k_heads * d.ratio();
    return s;
}

namespace {

// The rank's channels of the convolution as rows of a [.., channels] tensor.
std::vector<TensorSlice> channel_rows(const HParams & hp, const ShardRange & k) {
    std::vector<TensorSlice> rows;
    for (const ShardRange & c : delta_net_channels(hp.delta, k)) rows.push_back(WeightDeclarer::rows(c, 1));
    return rows;
}

// The rank's value heads as rows of a tensor with `unit` rows per head.
std::vector<TensorSlice> value_rows(const HParams & hp, const ShardRange & k, int64_t unit) {
    std::vector<TensorSlice> rows;
    for (const ShardRange & v : delta_net_value_heads(hp.delta, k)) rows.push_back(WeightDeclarer::rows(v, unit));
    return rows;
}

std::vector<TensorSlice> value_cols(const HParams & hp, const ShardRange & k) {
    std::vector<TensorSlice> cols;
    for (const ShardRange & v : delta_net_value_heads(hp.delta, k)) cols.push_back(WeightDeclarer::cols(v, 1));
    return cols;
}

}  // namespace

void declare_delta_net_weights(WeightDeclarer & d, int il, LayerWeights & l) {
    const HParams & hp = d.hp;
    const DeltaNetShape & s = hp.delta;
    const ShardRange & k = d.shard().delta_heads;
    const std::string p = hp.tensor_prefix(il);
    const int64_t E = hp.n_embd, V = s.n_v_heads;
    l.attn_norm = d.declare(p + "attn_norm.weight", {E}, false);
    if (s.fused_qkvz) {
        l.ssm_qkvz = d.declare_rows(p + "ssm_in.weight", {E, s.n_k_heads * s.qkvz_group()},
                                    {WeightDeclarer::rows(k, s.qkvz_group())});
    } else {
        l.ssm_qkv = d.declare_rows(p + "attn_qkv.weight", {E, s.channels()}, channel_rows(hp, k));
        l.ssm_gate = d.declare_rows(p + "attn_gate.weight", {E, s.value_dim()}, value_rows(hp, k, s.head_v_dim));
    }
    l.ssm_conv = d.declare_rows(p + "ssm_conv1d.weight", {s.conv_kernel, s.channels()}, channel_rows(hp, k), false);
    l.ssm_dt = d.declare_cols(p + "ssm_dt.bias", {V}, value_cols(hp, k), false);
    l.ssm_a = d.declare_cols(p + "ssm_a", {V}, value_cols(hp, k), false);
    // One row per value head: a slice's rows would take other kernels than
    // the whole's (ShardPlan::tiled), so every rank projects all of them and
    // keeps its own (GraphBuilder::delta_projections).
    if (s.fused_ba) {
        l.ssm_ba = d.declare(p + "ssm_ba.weight", {E, 2 * V}, true);
    } else {
        l.ssm_beta = d.declare(p + "ssm_beta.weight", {E, V}, true);
        l.ssm_alpha = d.declare(p + "ssm_alpha.weight", {E, V}, true);
    }
    l.ssm_norm = d.declare(p + "ssm_norm.weight", {s.head_v_dim}, false);
    l.ssm_out = d.row_parallel(p + "ssm_out.weight", {s.value_dim(), E}, d.shard().delta_pieces, s.head_v_dim, false,
                               d.shard().delta_cells);
}

// x / |x| over each head's row, as upstream computes it (an RMS norm scaled).
static ggml_tensor * l2_norm(ggml_context * ctx, ggml_tensor * x, float eps) {
    const float n = (float) x->ne[0];
    return ggml_scale(ctx, ggml_rms_norm(ctx, x, eps / n), 1.0f / std::sqrt(n));
}

// One run's sequences through the convolution and the delta rule:
// [head_v_dim, value heads, run tokens] of the gated-normed output. The
// states are read at the run's rows (cleared where a sequence starts:
// Rank::clear_new_states) and written back there.
ggml_tensor * GraphBuilder::delta_run(int il, const DeltaProjections & in_proj, const StateRun & run) const {
    const DeltaNetShape & s = hp.delta;
    const LayerWeights & l = w.layers[il];
    const int64_t nk = w.shard().delta_heads.size(), nv = nk * s.ratio();
    const int64_t dk = s.head_k_dim, dv = s.head_v_dim, C = in_proj.qkv->ne[0];
    const int64_t nt = run.n_tokens, ns = run.n_seqs, K = s.conv_kernel;
    ggml_tensor * rows = ggml_view_1d(ctx, in.state_rows, ns, (size_t) run.first * sizeof(int32_t));
    // The run's tokens of a contiguous [n, T]: [n, nt, ns], consecutive rows,
    // so contiguous themselves (no copy to reshape them).
    auto tokens_of = [&](ggml_tensor * t) {
        return ggml_view_3d(ctx, t, t->ne[0], nt, ns, t->nb[1], t->nb[1] * nt, t->nb[1] * run.t0);
    };

    // The convolution over the state's last K - 1 inputs and the run's.
    ggml_tensor * conv_all = kv.conv_state(il);
    ggml_tensor * conv_prev = ggml_get_rows(ctx, conv_all, rows);
    conv_prev = ggml_reshape_3d(ctx, conv_prev, K - 1, C, ns);
    ggml_tensor * conv_in =
        ggml_concat(ctx, conv_prev, ggml_transpose(ctx, tokens_of(in_proj.qkv)), 0);  // [K - 1 + nt, C, ns]
    ggml_tensor * conv_last =
        ggml_view_3d(ctx, conv_in, K - 1, C, ns, conv_in->nb[1], conv_in->nb[2], ggml_row_size(conv_in->type, nt));
    ggml_build_forward_expand(
        gf, ggml_set_rows(ctx, conv_all, ggml_reshape_2d(ctx, ggml_cont(ctx, conv_last), conv_all->ne[0], ns), rows));
    ggml_tensor * conv = ggml_silu(ctx, ggml_ssm_conv(ctx, conv_in, l.ssm_conv));  // [C, nt, ns]

    const size_t row = conv->nb[1];
    ggml_tensor * q = ggml_view_4d(ctx, conv, dk, nk, nt, ns, ggml_row_size(conv->type, dk), row, row * nt, 0);
    ggml_tensor * k = ggml_view_4d(ctx, conv, dk, nk, nt, ns, ggml_row_size(conv->type, dk), row, row * nt,
                                   ggml_row_size(conv->type, nk * dk));
    ggml_tensor * v = ggml_view_4d(ctx, conv, dv, nv, nt, ns, ggml_row_size(conv->type, dv), row, row * nt,
                                   ggml_row_size(conv->type, 2 * nk * dk));
    q = l2_norm(ctx, q, hp.rms_eps);
    k = l2_norm(ctx, k, hp.rms_eps);
    if (s.grouped && s.ratio() > 1 && nk > 1) {
        // ggml's delta rule gives value head j key head j % nk: each key
        // head repeated for its value heads, in place.
        auto each_repeated = [&](ggml_tensor * t) {
            ggml_tensor * one = ggml_reshape_4d(ctx, t, dk, 1, nk, nt * ns);
            ggml_tensor * rep = ggml_repeat_4d(ctx, one, dk, s.ratio(), nk, nt * ns);
            return ggml_reshape_4d(ctx, rep, dk, nv, nt, ns);
        };
        q = each_repeated(q);
        k = each_repeated(k);
    }
    ggml_tensor * g = ggml_reshape_4d(ctx, tokens_of(in_proj.decay), 1, nv, nt, ns);
    ggml_tensor * beta = ggml_reshape_4d(ctx, tokens_of(in_proj.beta), 1, nv, nt, ns);

    // The delta rule from the state, which it then replaces.
    ggml_tensor * state_all = kv.delta_state(il);
    ggml_tensor * state = ggml_get_rows(ctx, state_all, rows);
    state = ggml_reshape_4d(ctx, state, dv, dv, nv, ns);
    ggml_tensor * out = ggml_gated_delta_net(ctx, q, k, v, g, beta, state, 1);
    ggml_tensor * attn = ggml_view_4d(ctx, out, dv, nv, nt, ns, ggml_row_size(out->type, dv),
                                      ggml_row_size(out->type, dv * nv), ggml_row_size(out->type, dv * nv * nt), 0);
    ggml_tensor * next = ggml_view_2d(ctx, out, state_all->ne[0], ns, ggml_row_size(out->type, state_all->ne[0]),
                                      ggml_row_size(out->type, dv * nv * nt * ns));
    ggml_build_forward_expand(gf, ggml_set_rows(ctx, state_all, next, rows));

    // Normed per head, gated by silu(z).
    ggml_tensor * z = ggml_reshape_4d(ctx, tokens_of(in_proj.z), dv, nv, nt, ns);
    ggml_tensor * y = ggml_mul(ctx, norm(attn, l.ssm_norm), ggml_silu(ctx, z));
    return ggml_reshape_3d(ctx, y, dv, nv, nt * ns);
}

// The batch's projections, the rank's heads of each (DeltaProjections).
GraphBuilder::DeltaProjections GraphBuilder::delta_projections(int il, ggml_tensor * cur) const {
    const DeltaNetShape & s = hp.delta;
    const LayerWeights & l = w.layers[il];
    const ShardRange & heads = w.shard().delta_heads;
    const int64_t nk = heads.size(), T = cur->ne[1], r = s.ratio();
    DeltaProjections p;
    if (l.ssm_qkvz) {
        // Each key head's q, k, v and z in turn: the segments gathered.
        ggml_tensor * all = project(l.ssm_qkvz, cur);  // [nk * group, T]
        const size_t group = ggml_row_size(all->type, s.qkvz_group());
        auto segment = [&](int64_t offset, int64_t width) {
            ggml_tensor * v = ggml_view_3d(ctx, all, width, nk, T, group, all->nb[1], ggml_row_size(all->type, offset));
            return ggml_cont_2d(ctx, v, width * nk, T);
        };
        const int64_t dk = s.head_k_dim, vw = r * s.head_v_dim;
        p.qkv = ggml_concat(ctx, ggml_concat(ctx, segment(0, dk), segment(dk, dk), 0), segment(2 * dk, vw), 0);
        p.z = segment(2 * dk + vw, vw);
    } else {
        p.qkv = project(l.ssm_qkv, cur);
        p.z = project(l.ssm_gate, cur);
    }
    // Every value head's, the rank's kept: [value heads, T].
    auto own_heads = [&](ggml_tensor * all) {
        if (all->ne[0] == nk * r) return all;
        ggml_tensor * mine = nullptr;
        for (const ShardRange & v : delta_net_value_heads(s, heads)) {
            ggml_tensor * part =
                ggml_view_2d(ctx, all, v.size(), all->ne[1], all->nb[1], ggml_row_size(all->type, v.begin));
            mine = mine ? ggml_concat(ctx, mine, part, 0) : ggml_cont(ctx, part);
        }
        return mine;
    };
    ggml_tensor *beta = nullptr, *alpha = nullptr;
    if (l.ssm_ba) {
        // Each key head's betas, then its alphas, for its value heads.
        ggml_tensor * all = project(l.ssm_ba, cur);  // [2 * value heads, T]
        auto half = [&](int64_t offset) {
            ggml_tensor * v = ggml_view_3d(ctx, all, r, nk, T, ggml_row_size(all->type, 2 * r), all->nb[1],
                                           ggml_row_size(all->type, 2 * r * heads.begin + offset));
            return ggml_cont_2d(ctx, v, r * nk, T);
        };
        beta = half(0);
        alpha = half(r);
    } else {
        beta = own_heads(project(l.ssm_beta, cur));
        alpha = own_heads(project(l.ssm_alpha, cur));
    }
    p.beta = ggml_sigmoid(ctx, beta);
    // The decay's log: softplus(alpha + dt) * a (a < 0).
    p.decay = ggml_mul(ctx, ggml_softplus(ctx, ggml_add(ctx, alpha, l.ssm_dt)), l.ssm_a);
    return p;
}

// Linear attention over the batch, projected back to n_embd and summed over
// the group (rows: see row_parallel).
ggml_tensor * GraphBuilder::delta_net(int il, ggml_tensor * cur, ggml_tensor * rows) {
    const LayerWeights & l = w.layers[il];
    stored.push_back({nullptr, nullptr});  // no cache: GraphBuilder::stored stays indexed by layer
    const DeltaProjections p = delta_projections(il, cur);
    ggml_tensor * y = nullptr;
    for (const StateRun & run : shape.state_runs) {
        ggml_tensor * part = delta_run(il, p, run);
        y = y ? ggml_concat(ctx, y, part, 2) : part;
    }
    const int64_t width = y->ne[0] * y->ne[1];
    return project(l.ssm_out, ggml_reshape_2d(ctx, y, width, shape.n_tokens), rows);
}

}  // namespace llama_tp
