#include "tools/make-model/model_spec.h"

#include "gguf.h"
#include "llama.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace llama_tp::make_model {
namespace {

// Spread (standard deviation) of the output logits for a unit-RMS final hidden
// state: next-token distributions come out peaked (mean top-1 probability near
// 0.7), like a trained model's. It does not make top-2 near-ties rarer in
// relative terms, since rounding differences scale with the logits (README.md).
constexpr float kLogitSpread = 10.0f;
constexpr float kNormStddev = 0.1f;  // norm weights are 1 + this * N(0, 1)
constexpr float kBiasStddev = 0.2f;
// Largest accepted size field: keeps every product of sizes well inside int64.
constexpr int64_t kMaxDim = int64_t(1) << 24;

template <typename Enum, size_t N>
Enum parse_enum(const std::string & text, const char * what, const char * const (&names)[N]) {
    for (size_t i = 0; i < N; ++i) {
        if (text == names[i]) {
            return static_cast<Enum>(i);
        }
    }
    std::string choices;
    for (size_t i = 0; i < N; ++i) {
        choices += (i ? "|" : "") + std::string(names[i]);
    }
    throw UsageError("unknown " + std::string(what) + " '" + text + "' (expected " + choices + ")");
}

const char * const kArchNames[] = {"llama",  "qwen2",   "qwen3",  "qwen3moe", "phi3",      "gemma2",
                                   "gemma3", "gpt-oss", "gemma4", "qwen35",   "qwen35moe", "qwen3next"};
const char * const kPresetNames[] = {"tiny", "small", "1b"};
const char * const kTypeNames[] = {"f32", "f16", "q8_0", "q4_0", "q4_k", "mxfp4"};

bool is_gemma(Arch arch) {
    return arch == Arch::gemma2 || arch == Arch::gemma3 || arch == Arch::gemma4;
}

// Linear attention beside gated full attention: Qwen 3.5's layers, dense or
// with experts, and Qwen3-Next's.
bool has_linear_attention(Arch arch) {
    return arch == Arch::qwen35 || arch == Arch::qwen35moe || arch == Arch::qwen3next;
}

// Routed experts beside a shared expert gated per token.
bool has_shared_expert(Arch arch) {
    return arch == Arch::qwen35moe || arch == Arch::qwen3next;
}

// gemma4's layers: sliding ones as the shape says, global ones with their own
// head size and KV heads; those sharing an earlier layer's cache store none.
struct LayerDims {
    int64_t head_dim, n_head_kv, n_ff;
    bool swa, own_kv;
};

LayerDims layer_dims(Arch arch, const Shape & s, int64_t il) {
    if (arch != Arch::gemma4) return {s.head_dim, s.n_head_kv, s.n_ff, false, true};
    const bool swa = is_swa_layer(s, il), own_kv = il < s.n_layer - s.n_kv_shared;
    return {swa ? s.head_dim : s.head_dim_global, swa ? s.n_head_kv : s.n_head_kv_global, own_kv ? s.n_ff : 2 * s.n_ff,
            swa, own_kv};
}

void require(bool condition, const std::string & message) {
    if (!condition) {
        throw UsageError(message);
    }
}

void require_in_range(int64_t value, const char * flag, int64_t max = kMaxDim) {
    require(value > 0 && value <= max,
            std::string(flag) + " must be between 1 and " + std::to_string(max) + ", got " + std::to_string(value));
}

void validate_attention(Arch arch, const Shape & s) {
    require(s.n_head_kv <= s.n_head, "--n-head-kv (" + std::to_string(s.n_head_kv) + ") must not exceed --n-head (" +
                                         std::to_string(s.n_head) + ")");
    require(s.n_head % s.n_head_kv == 0, "--n-head-kv (" + std::to_string(s.n_head_kv) + ") must divide --n-head (" +
                                             std::to_string(s.n_head) + ")");
    require(s.head_dim % 2 == 0, "head dimension must be even for RoPE, got " + std::to_string(s.head_dim));
    if (arch == Arch::qwen2 || arch == Arch::phi3) {
        // Their loaders size the queries and attn_output as n_embd x n_embd.
        require(s.head_dim * s.n_head == s.n_embd,
                std::string(arch_name(arch)) + " needs --head-dim * --n-head == --n-embd, got " +
                    std::to_string(s.head_dim) + " * " + std::to_string(s.n_head) + " != " + std::to_string(s.n_embd));
    }
}

void validate_experts(const Shape & s) {
    if (!has_experts(s)) {
        return;
    }
    require_in_range(s.n_expert, "--n-expert", 1024);  // upstream's LLAMA_MAX_EXPERTS
    require_in_range(s.n_expert_used, "--n-expert-used", 1024);
    require_in_range(s.n_ff_exp, "--n-ff-exp");
    require(s.n_expert_used <= s.n_expert, "--n-expert-used (" + std::to_string(s.n_expert_used) +
                                               ") must not exceed --n-expert (" + std::to_string(s.n_expert) + ")");
}

void validate_shape(Arch arch, const Shape & s) {
    require_in_range(s.n_embd, "--n-embd");
    require_in_range(s.n_layer, "--n-layer", 512);  // upstream's LLAMA_MAX_LAYERS
    require_in_range(s.n_head, "--n-head");
    require_in_range(s.n_head_kv, "--n-head-kv");
    require_in_range(s.head_dim, "--head-dim");
    require_in_range(s.n_ff, "--n-ff");
    require_in_range(s.n_ctx, "--n-ctx", int64_t(1) << 31);
    require_in_range(s.n_ctx_orig, "--n-ctx-orig", s.n_ctx);
    require(std::isfinite(s.rope_theta) && s.rope_theta > 0.0, "--rope-theta must be a positive number");
    validate_attention(arch, s);
    validate_experts(s);
    if (is_gemma(arch) || arch == Arch::gpt_oss) {
        require_in_range(s.n_swa, "--n-swa", int64_t(1) << 31);
    }
    if (is_gemma(arch) || s.swa_pattern != 0) {
        require_in_range(s.swa_pattern, "--swa-pattern", 512);
    }
    if (has_linear_attention(arch)) {
        require_in_range(s.full_attention_interval, "--full-attention-interval", 512);
        require_in_range(s.ssm_n_group, "--ssm-n-group");
        require_in_range(s.ssm_dt_rank, "--ssm-dt-rank");
        require_in_range(s.ssm_d_state, "--ssm-d-state");
        require(s.ssm_dt_rank % s.ssm_n_group == 0, "--ssm-dt-rank (" + std::to_string(s.ssm_dt_rank) +
                                                        ") must be a multiple of --ssm-n-group (" +
                                                        std::to_string(s.ssm_n_group) + ")");
        require(s.n_rot % 2 == 0 && s.n_rot >= 6,
                "qwen35 rotates a quarter of each head: --head-dim must be at least 24");
        require(s.n_nextn <= 1, "--nextn-layers must be 1 (upstream's multi-token prediction reads one layer), got " +
                                    std::to_string(s.n_nextn));
    }
    if (arch == Arch::gemma4) {
        require_in_range(s.head_dim_global, "--head-dim-global");
        require_in_range(s.n_head_kv_global, "--n-head-kv-global", s.n_head);
        require(s.n_head % s.n_head_kv_global == 0 && s.head_dim_global % 8 == 0,
                "--n-head-kv-global must divide --n-head and --head-dim-global be a multiple of 8");
        require(s.n_kv_shared >= 0 && s.n_embd_per_layer >= 0, "--n-kv-shared and --n-embd-per-layer must be >= 0");
        if (s.n_kv_shared > 0) {
            // Shared layers read the last own layer of their kind: global at n - 1, sliding at n - 2.
            const int64_t n = s.n_layer - s.n_kv_shared;
            require(n >= 2 && !is_swa_layer(s, n - 1) && is_swa_layer(s, n - 2),
                    "--n-kv-shared must leave at least 2 layers with a cache, the last global and the one before "
                    "it sliding");
        }
    }
}

ggml_type matrix_type(WeightType type) {
    switch (type) {
        case WeightType::f32:
            return GGML_TYPE_F32;
        case WeightType::f16:
            return GGML_TYPE_F16;
        case WeightType::q8_0:
            return GGML_TYPE_Q8_0;
        case WeightType::q4_0:
            return GGML_TYPE_Q4_0;
        case WeightType::q4_k:
            return GGML_TYPE_Q4_K;
        case WeightType::mxfp4:
            return GGML_TYPE_MXFP4;
    }
    return GGML_TYPE_F32;
}

// Embedding and output head stay at 8 bits under 4-bit types, as in real
// quantized releases: they are the most precision-sensitive matrices.
ggml_type embedding_type(WeightType type) {
    switch (type) {
        case WeightType::f32:
            return GGML_TYPE_F32;
        case WeightType::f16:
            return GGML_TYPE_F16;
        default:
            return GGML_TYPE_Q8_0;
    }
}

int32_t llama_file_type(WeightType type) {
    switch (type) {
        case WeightType::f32:
            return LLAMA_FTYPE_ALL_F32;
        case WeightType::f16:
            return LLAMA_FTYPE_MOSTLY_F16;
        case WeightType::q8_0:
            return LLAMA_FTYPE_MOSTLY_Q8_0;
        case WeightType::q4_0:
            return LLAMA_FTYPE_MOSTLY_Q4_0;
        case WeightType::q4_k:
            return LLAMA_FTYPE_MOSTLY_Q4_K_M;  // 4-bit K-quant body, 8-bit embedding and output
        case WeightType::mxfp4:
            return LLAMA_FTYPE_MOSTLY_MXFP4_MOE;
    }
    return LLAMA_FTYPE_ALL_F32;
}

// Builds the tensor list in the order the upstream converter writes it.
class TensorPlanner {
  public:
    explicit TensorPlanner(WeightType type) : type_(type) {}

    void matrix(const std::string & name, std::vector<int64_t> ne, float gain = 1.0f) {
        const float stddev = gain / std::sqrt(static_cast<float>(ne[0]));
        add(name, std::move(ne), storage_type(matrix_type(type_), ne[0]), 0.0f, stddev);
    }
    void embedding(const std::string & name, std::vector<int64_t> ne, float stddev) {
        add(name, std::move(ne), storage_type(embedding_type(type_), ne[0]), 0.0f, stddev);
    }
    void norm(const std::string & name, int64_t n, float scale = 1.0f) {
        add(name, {n}, GGML_TYPE_F32, scale, scale * kNormStddev);
    }
    void bias(const std::string & name, int64_t n) { add(name, {n}, GGML_TYPE_F32, 0.0f, kBiasStddev); }
    void bias(const std::string & name, std::vector<int64_t> ne) {
        add(name, std::move(ne), GGML_TYPE_F32, 0.0f, kBiasStddev);
    }
    void sink(const std::string & name, int64_t n) { add(name, {n}, GGML_TYPE_F32, 0.0f, 1.0f); }
    // A convolution's taps (f32, as converters keep them): each output a
    // unit-gain mix of its channel's last ne[0] inputs.
    void taps(const std::string & name, std::vector<int64_t> ne) {
        const float stddev = 1.0f / std::sqrt(static_cast<float>(ne[0]));
        add(name, std::move(ne), GGML_TYPE_F32, 0.0f, stddev);
    }
    // A decay rate per head, negative (Gated DeltaNet's -exp(A_log)).
    void rate(const std::string & name, int64_t n) { add(name, {n}, GGML_TYPE_F32, -1.0f, 0.3f); }
    void constant(const std::string & name, std::vector<float> values) {
        add(name, {(int64_t) values.size()}, GGML_TYPE_F32, 0.0f, 0.0f);
        plans_.back().values = std::move(values);
    }
    // Router weights stay f32 whatever the type, as upstream's converter keeps them.
    void router(const std::string & name, std::vector<int64_t> ne) {
        const float stddev = 1.0f / std::sqrt(static_cast<float>(ne[0]));
        add(name, std::move(ne), GGML_TYPE_F32, 0.0f, stddev);
    }

    std::vector<TensorPlan> take() { return std::move(plans_); }

  private:
    // The requested type when whole blocks fit a row; otherwise the next best
    // type that fits (q8_0, then f16), with the reason kept for the report.
    ggml_type storage_type(ggml_type wanted, int64_t row_length) {
        pending_fallback_.clear();
        if (row_length % ggml_blck_size(wanted) == 0) {
            return wanted;
        }
        const ggml_type chosen = (ggml_blck_size(wanted) > ggml_blck_size(GGML_TYPE_Q8_0) &&
                                  row_length % ggml_blck_size(GGML_TYPE_Q8_0) == 0)
                                     ? GGML_TYPE_Q8_0
                                     : GGML_TYPE_F16;
        pending_fallback_ = "row length " + std::to_string(row_length) + " is not a multiple of " +
                            std::to_string(ggml_blck_size(wanted)) + " (" + ggml_type_name(wanted) +
                            " block), stored as " + ggml_type_name(chosen);
        return chosen;
    }

    void add(const std::string & name, std::vector<int64_t> ne, ggml_type type, float mean, float stddev) {
        TensorPlan plan;
        plan.name = name;
        plan.ne = std::move(ne);
        plan.type = type;
        plan.mean = mean;
        plan.stddev = stddev;
        plan.fallback = std::move(pending_fallback_);
        pending_fallback_.clear();
        plans_.push_back(std::move(plan));
    }

    WeightType type_;
    std::string pending_fallback_;
    std::vector<TensorPlan> plans_;
};

std::string layer_tensor(int64_t layer, const char * name) {
    return "blk." + std::to_string(layer) + "." + name;
}

// gemma4's attention: Q and K normed by head, V only where the layer slides
// (global layers' values are their keys), no K or V where the layer shares
// an earlier layer's cache.
void plan_gemma4_attention(TensorPlanner & planner, const Shape & s, int64_t il) {
    const LayerDims d = layer_dims(Arch::gemma4, s, il);
    const int64_t n_q = s.n_head * d.head_dim, n_kv = d.n_head_kv * d.head_dim;
    planner.norm(layer_tensor(il, "attn_norm.weight"), s.n_embd);
    planner.matrix(layer_tensor(il, "attn_q.weight"), {s.n_embd, n_q});
    if (d.own_kv) planner.matrix(layer_tensor(il, "attn_k.weight"), {s.n_embd, n_kv});
    if (d.own_kv && d.swa) planner.matrix(layer_tensor(il, "attn_v.weight"), {s.n_embd, n_kv});
    planner.matrix(layer_tensor(il, "attn_output.weight"), {n_q, s.n_embd});
    planner.norm(layer_tensor(il, "attn_q_norm.weight"), d.head_dim);
    if (d.own_kv) planner.norm(layer_tensor(il, "attn_k_norm.weight"), d.head_dim);
    planner.norm(layer_tensor(il, "post_attention_norm.weight"), s.n_embd);
    planner.norm(layer_tensor(il, "layer_output_scale.weight"), 1);
}

// gemma4's FFN: GELU-gated, as wide as the layer says; with experts a dense
// FFN beside them, the experts' gate and up fused, each part normed.
void plan_gemma4_feed_forward(TensorPlanner & planner, const Shape & s, int64_t il) {
    const LayerDims d = layer_dims(Arch::gemma4, s, il);
    planner.norm(layer_tensor(il, "ffn_norm.weight"), s.n_embd);
    planner.matrix(layer_tensor(il, "ffn_gate.weight"), {s.n_embd, d.n_ff});
    planner.matrix(layer_tensor(il, "ffn_up.weight"), {s.n_embd, d.n_ff});
    planner.matrix(layer_tensor(il, "ffn_down.weight"), {d.n_ff, s.n_embd});
    planner.norm(layer_tensor(il, "post_ffw_norm.weight"), s.n_embd);
    if (has_experts(s)) {
        planner.router(layer_tensor(il, "ffn_gate_inp.weight"), {s.n_embd, s.n_expert});
        planner.norm(layer_tensor(il, "ffn_gate_inp.scale"), s.n_embd);
        planner.matrix(layer_tensor(il, "ffn_gate_up_exps.weight"), {s.n_embd, 2 * s.n_ff_exp, s.n_expert});
        planner.matrix(layer_tensor(il, "ffn_down_exps.weight"), {s.n_ff_exp, s.n_embd, s.n_expert});
        planner.norm(layer_tensor(il, "ffn_down_exps.scale"), s.n_expert);
        planner.norm(layer_tensor(il, "post_ffw_norm_1.weight"), s.n_embd);
        planner.norm(layer_tensor(il, "pre_ffw_norm_2.weight"), s.n_embd);
        planner.norm(layer_tensor(il, "post_ffw_norm_2.weight"), s.n_embd);
    }
    if (s.n_embd_per_layer > 0) {
        planner.matrix(layer_tensor(il, "inp_gate.weight"), {s.n_embd, s.n_embd_per_layer});
        planner.matrix(layer_tensor(il, "proj.weight"), {s.n_embd_per_layer, s.n_embd});
        planner.norm(layer_tensor(il, "post_norm.weight"), s.n_embd);
    }
}

// Linear attention (Gated DeltaNet), as the converters write it: Q, K and V
// of the convolution in one matrix (q, k, v segments; qwen35's value heads
// in tiled order, qwen3next's grouped by key head), the output gate (or, with
// ssm_in, q, k, v and the gate of each key head in turn), the convolution's
// taps, the decay's projection (alpha), bias (dt) and rate (a, negative), the
// update strength (beta; qwen3next's fused with alpha, each key head's betas
// then alphas), a norm per head and the output projection.
void plan_linear_attention(TensorPlanner & planner, Arch arch, const Shape & s, int64_t il) {
    const int64_t key_dim = s.ssm_n_group * s.ssm_d_state, value_dim = s.ssm_dt_rank * s.ssm_d_state;
    planner.norm(layer_tensor(il, "attn_norm.weight"), s.n_embd);
    if (s.ssm_in) {
        planner.matrix(layer_tensor(il, "ssm_in.weight"), {s.n_embd, 2 * key_dim + 2 * value_dim});
    } else {
        planner.matrix(layer_tensor(il, "attn_qkv.weight"), {s.n_embd, 2 * key_dim + value_dim});
        planner.matrix(layer_tensor(il, "attn_gate.weight"), {s.n_embd, value_dim});
    }
    planner.taps(layer_tensor(il, "ssm_conv1d.weight"), {s.ssm_d_conv, 2 * key_dim + value_dim});
    planner.bias(layer_tensor(il, "ssm_dt.bias"), s.ssm_dt_rank);
    planner.rate(layer_tensor(il, "ssm_a"), s.ssm_dt_rank);
    if (arch == Arch::qwen3next) {
        planner.matrix(layer_tensor(il, "ssm_ba.weight"), {s.n_embd, 2 * s.ssm_dt_rank});
    } else {
        planner.matrix(layer_tensor(il, "ssm_beta.weight"), {s.n_embd, s.ssm_dt_rank});
        planner.matrix(layer_tensor(il, "ssm_alpha.weight"), {s.n_embd, s.ssm_dt_rank});
    }
    planner.norm(layer_tensor(il, "ssm_norm.weight"), s.ssm_d_state);
    planner.matrix(layer_tensor(il, "ssm_out.weight"), {value_dim, s.n_embd});
}

// qwen35's and qwen3next's full attention: each head's queries followed by its output gate in
// attn_q, Q and K normed by head.
void plan_gated_attention(TensorPlanner & planner, const Shape & s, int64_t il) {
    const int64_t n_q = s.n_head * s.head_dim, n_kv = s.n_head_kv * s.head_dim;
    planner.norm(layer_tensor(il, "attn_norm.weight"), s.n_embd);
    planner.matrix(layer_tensor(il, "attn_q.weight"), {s.n_embd, 2 * n_q});
    planner.matrix(layer_tensor(il, "attn_k.weight"), {s.n_embd, n_kv});
    planner.matrix(layer_tensor(il, "attn_v.weight"), {s.n_embd, n_kv});
    planner.matrix(layer_tensor(il, "attn_output.weight"), {n_q, s.n_embd});
    planner.norm(layer_tensor(il, "attn_q_norm.weight"), s.head_dim);
    planner.norm(layer_tensor(il, "attn_k_norm.weight"), s.head_dim);
}

void plan_attention(TensorPlanner & planner, Arch arch, const Shape & s, int64_t il) {
    if (arch == Arch::gemma4) return plan_gemma4_attention(planner, s, il);
    if (has_linear_attention(arch)) {
        return is_linear_attention_layer(s, il) ? plan_linear_attention(planner, arch, s, il)
                                                : plan_gated_attention(planner, s, il);
    }
    const int64_t n_q = s.n_head * s.head_dim;
    const int64_t n_kv = s.n_head_kv * s.head_dim;
    planner.norm(layer_tensor(il, "attn_norm.weight"), s.n_embd);
    if (arch == Arch::phi3) {
        // Q, K and V fused in one matrix, in that order.
        planner.matrix(layer_tensor(il, "attn_qkv.weight"), {s.n_embd, n_q + 2 * n_kv});
        planner.matrix(layer_tensor(il, "attn_output.weight"), {n_q, s.n_embd});
        return;
    }
    planner.matrix(layer_tensor(il, "attn_q.weight"), {s.n_embd, n_q});
    planner.matrix(layer_tensor(il, "attn_k.weight"), {s.n_embd, n_kv});
    planner.matrix(layer_tensor(il, "attn_v.weight"), {s.n_embd, n_kv});
    if (arch == Arch::qwen2 || arch == Arch::gpt_oss) {
        planner.bias(layer_tensor(il, "attn_q.bias"), n_q);
        planner.bias(layer_tensor(il, "attn_k.bias"), n_kv);
        planner.bias(layer_tensor(il, "attn_v.bias"), n_kv);
    }
    planner.matrix(layer_tensor(il, "attn_output.weight"), {n_q, s.n_embd});
    if (arch == Arch::gpt_oss) {
        planner.bias(layer_tensor(il, "attn_output.bias"), s.n_embd);
        // A sink logit per query head, of the scores' order of magnitude.
        planner.sink(layer_tensor(il, "attn_sinks.weight"), s.n_head);
    }
    if (is_gemma(arch)) {
        planner.norm(layer_tensor(il, "post_attention_norm.weight"), s.n_embd);
    }
    if (arch == Arch::qwen3 || arch == Arch::qwen3moe || arch == Arch::gemma3) {
        planner.norm(layer_tensor(il, "attn_q_norm.weight"), s.head_dim);
        planner.norm(layer_tensor(il, "attn_k_norm.weight"), s.head_dim);
    }
}

void plan_feed_forward(TensorPlanner & planner, Arch arch, const Shape & s, int64_t il) {
    if (arch == Arch::gemma4) return plan_gemma4_feed_forward(planner, s, il);
    // gpt-oss, qwen35 and qwen3next name their FFN's input norm post_attention_norm.
    const bool post = arch == Arch::gpt_oss || has_linear_attention(arch);
    planner.norm(layer_tensor(il, post ? "post_attention_norm.weight" : "ffn_norm.weight"), s.n_embd);
    if (arch == Arch::phi3) {
        // Gate and up fused in one matrix, gate first.
        planner.matrix(layer_tensor(il, "ffn_up.weight"), {s.n_embd, 2 * s.n_ff});
        planner.matrix(layer_tensor(il, "ffn_down.weight"), {s.n_ff, s.n_embd});
        return;
    }
    if (has_experts(s)) {
        // gpt-oss: a bias on the router and on every expert's matrices.
        const bool biased = arch == Arch::gpt_oss;
        planner.router(layer_tensor(il, "ffn_gate_inp.weight"), {s.n_embd, s.n_expert});
        if (biased) planner.bias(layer_tensor(il, "ffn_gate_inp.bias"), s.n_expert);
        planner.matrix(layer_tensor(il, "ffn_gate_exps.weight"), {s.n_embd, s.n_ff_exp, s.n_expert});
        if (biased) planner.bias(layer_tensor(il, "ffn_gate_exps.bias"), {s.n_ff_exp, s.n_expert});
        planner.matrix(layer_tensor(il, "ffn_up_exps.weight"), {s.n_embd, s.n_ff_exp, s.n_expert});
        if (biased) planner.bias(layer_tensor(il, "ffn_up_exps.bias"), {s.n_ff_exp, s.n_expert});
        planner.matrix(layer_tensor(il, "ffn_down_exps.weight"), {s.n_ff_exp, s.n_embd, s.n_expert});
        if (biased) planner.bias(layer_tensor(il, "ffn_down_exps.bias"), {s.n_embd, s.n_expert});
        if (has_shared_expert(arch)) {
            // A shared expert as wide as a routed one, its gate one logit a token.
            planner.router(layer_tensor(il, "ffn_gate_inp_shexp.weight"), {s.n_embd});
            planner.matrix(layer_tensor(il, "ffn_gate_shexp.weight"), {s.n_embd, s.n_ff_exp});
            planner.matrix(layer_tensor(il, "ffn_up_shexp.weight"), {s.n_embd, s.n_ff_exp});
            planner.matrix(layer_tensor(il, "ffn_down_shexp.weight"), {s.n_ff_exp, s.n_embd});
        }
        return;
    }
    planner.matrix(layer_tensor(il, "ffn_gate.weight"), {s.n_embd, s.n_ff});
    planner.matrix(layer_tensor(il, "ffn_up.weight"), {s.n_embd, s.n_ff});
    planner.matrix(layer_tensor(il, "ffn_down.weight"), {s.n_ff, s.n_embd});
    if (is_gemma(arch)) {
        planner.norm(layer_tensor(il, "post_ffw_norm.weight"), s.n_embd);
    }
}

// A multi-token-prediction layer, as upstream's qwen35 loader reads one: the
// hidden state and the next token's embedding, each normed, projected
// together to n_embd, then a gated full-attention layer with its FFN and a
// norm before the (shared) output head.
void plan_nextn_layer(TensorPlanner & planner, Arch arch, const Shape & s, int64_t il) {
    planner.matrix(layer_tensor(il, "nextn.eh_proj.weight"), {2 * s.n_embd, s.n_embd});
    planner.norm(layer_tensor(il, "nextn.enorm.weight"), s.n_embd);
    planner.norm(layer_tensor(il, "nextn.hnorm.weight"), s.n_embd);
    plan_gated_attention(planner, s, il);
    plan_feed_forward(planner, arch, s, il);
    planner.norm(layer_tensor(il, "nextn.shared_head_norm.weight"), s.n_embd);
}

// Overrides that only some architectures take. Experts: qwen3moe and gpt-oss
// always (their own width, --n-ff-exp), llama where --n-expert asks for them
// (Mixtral: each expert --n-ff wide).
void check_arch_overrides(Arch arch, const ShapeOverrides & o) {
    const std::string name = arch_name(arch);
    if (arch != Arch::phi3 && o.n_ctx_orig) {
        throw UsageError("--n-ctx-orig applies to phi3 (LongRoPE) only, not " + name);
    }
    if (!is_gemma(arch) && o.logit_softcap) {
        throw UsageError("--logit-softcap applies to gemma2, gemma3 and gemma4 only, not " + name);
    }
    if (!is_gemma(arch) && arch != Arch::gpt_oss && (o.n_swa || o.swa_pattern)) {
        throw UsageError("--n-swa and --swa-pattern apply to gemma2, gemma3, gemma4 and gpt-oss, not " + name);
    }
    if (arch != Arch::gemma4 && (o.head_dim_global || o.n_head_kv_global || o.n_embd_per_layer || o.n_kv_shared)) {
        throw UsageError(
            "--head-dim-global, --n-head-kv-global, --n-embd-per-layer and --n-kv-shared apply to gemma4 only, not " +
            name);
    }
    const bool moe = arch == Arch::qwen3moe || arch == Arch::gpt_oss || arch == Arch::gemma4 || has_shared_expert(arch);
    if (!moe && arch != Arch::llama && (o.n_expert || o.n_expert_used || o.n_ff_exp)) {
        throw UsageError(
            "--n-expert, --n-expert-used and --n-ff-exp apply to llama, qwen3moe, qwen35moe, qwen3next, gemma4 and "
            "gpt-oss, not " +
            name);
    }
    if (arch == Arch::llama && o.n_ff_exp) {
        throw UsageError("llama experts are --n-ff wide: --n-ff-exp applies to qwen3moe and gpt-oss only");
    }
    if (arch == Arch::llama && o.n_expert_used && !o.n_expert) {
        throw UsageError("--n-expert-used needs --n-expert for llama");
    }
    if (!has_linear_attention(arch) && (o.full_attention_interval || o.ssm_n_group || o.ssm_dt_rank || o.ssm_d_state)) {
        throw UsageError("--full-attention-interval and --ssm-* apply to qwen35, qwen35moe and qwen3next only, not " +
                         name);
    }
    if (!has_linear_attention(arch) && o.nextn_layers) {
        throw UsageError("--nextn-layers applies to qwen35, qwen35moe and qwen3next only, not " + name);
    }
    if (arch != Arch::qwen3next && o.ssm_in) {
        throw UsageError("--ssm-in applies to qwen3next only, not " + name);
    }
    if (arch != Arch::qwen3 && o.reranker) {
        throw UsageError("--reranker applies to qwen3 only (Qwen3-Reranker), not " + name);
    }
}

std::string arch_key(Arch arch, const char * suffix) {
    return std::string(arch_name(arch)) + "." + suffix;
}

// gemma4's per-layer shapes and sharing, under the keys its converter writes:
// arrays where layers differ (head_count_kv, feed_forward_length, the
// sliding-window flags), the global layers' head size as key_length and the
// sliding ones' as key_length_swa.
void set_gemma4_metadata(gguf_context * gguf, const Shape & s) {
    const auto key = [](const char * suffix) { return arch_key(Arch::gemma4, suffix); };
    const auto set_u32 = [&](const char * suffix, int64_t v) {
        gguf_set_val_u32(gguf, key(suffix).c_str(), static_cast<uint32_t>(v));
    };
    std::vector<int32_t> kv_heads, ff;
    std::vector<int8_t> swa;
    for (int64_t il = 0; il < s.n_layer; ++il) {
        const LayerDims d = layer_dims(Arch::gemma4, s, il);
        kv_heads.push_back((int32_t) d.n_head_kv);
        ff.push_back((int32_t) d.n_ff);
        swa.push_back(d.swa ? 1 : 0);
    }
    gguf_set_arr_data(gguf, key("attention.head_count_kv").c_str(), GGUF_TYPE_INT32, kv_heads.data(), kv_heads.size());
    if (s.n_kv_shared > 0) {
        gguf_set_arr_data(gguf, key("feed_forward_length").c_str(), GGUF_TYPE_INT32, ff.data(), ff.size());
    }
    gguf_set_arr_data(gguf, key("attention.sliding_window_pattern").c_str(), GGUF_TYPE_BOOL, swa.data(), swa.size());
    set_u32("attention.key_length", s.head_dim_global);
    set_u32("attention.value_length", s.head_dim_global);
    set_u32("attention.key_length_swa", s.head_dim);
    set_u32("attention.value_length_swa", s.head_dim);
    set_u32("rope.dimension_count", s.head_dim_global);
    set_u32("rope.dimension_count_swa", s.head_dim);
    gguf_set_val_f32(gguf, key("rope.freq_base_swa").c_str(), 10000.0f);
    set_u32("attention.sliding_window", s.n_swa);
    set_u32("attention.shared_kv_layers", s.n_kv_shared);
    set_u32("embedding_length_per_layer_input", s.n_embd_per_layer);
    gguf_set_val_f32(gguf, key("final_logit_softcapping").c_str(), static_cast<float>(s.logit_softcap));
}

}  // namespace

const char * arch_name(Arch arch) {
    return kArchNames[static_cast<int>(arch)];
}
const char * preset_name(Preset preset) {
    return kPresetNames[static_cast<int>(preset)];
}
const char * weight_type_name(WeightType type) {
    return kTypeNames[static_cast<int>(type)];
}
Arch parse_arch(const std::string & text) {
    return parse_enum<Arch>(text, "architecture", kArchNames);
}
Preset parse_preset(const std::string & text) {
    return parse_enum<Preset>(text, "preset", kPresetNames);
}
WeightType parse_weight_type(const std::string & text) {
    return parse_enum<WeightType>(text, "type", kTypeNames);
}

bool has_experts(const Shape & s) {
    return s.n_expert > 0;
}

bool is_swa_layer(const Shape & s, int64_t il) {
    return s.n_swa > 0 && s.swa_pattern > 0 && il % s.swa_pattern < s.swa_pattern - 1;
}

bool is_linear_attention_layer(const Shape & s, int64_t il) {
    return s.full_attention_interval > 0 && (il + 1) % s.full_attention_interval != 0;
}

const char * default_vocab_file(Arch arch) {
    switch (arch) {
        case Arch::llama:
        case Arch::gemma2:
        case Arch::gemma3:  // SentencePiece, as Gemma's own (not in the pinned tree)
        case Arch::gemma4:  // SentencePiece too; Gemma 4's own 262144 tokens would dwarf a test model
            return "ggml-vocab-llama-spm.gguf";
        case Arch::phi3:
            return "ggml-vocab-phi-3.gguf";
        case Arch::gpt_oss:  // byte-level BPE, as gpt-oss's own o200k (not in the pinned tree)
            return "ggml-vocab-gpt-2.gguf";
        default:
            return "ggml-vocab-qwen2.gguf";
    }
}

const char * default_chat_template_file(Arch arch) {
    return arch == Arch::gpt_oss ? "openai-gpt-oss-120b.jinja" : nullptr;  // harmony
}

bool ShapeOverrides::any() const {
    return n_embd || n_layer || n_head || n_head_kv || head_dim || n_ff || n_ctx || n_ctx_orig || rope_theta || n_swa ||
           swa_pattern || logit_softcap || n_expert || n_expert_used || n_ff_exp || tied_output || reranker ||
           head_dim_global || n_head_kv_global || n_embd_per_layer || n_kv_shared || full_attention_interval ||
           ssm_n_group || ssm_dt_rank || ssm_d_state || ssm_in || nextn_layers;
}

// Head dimension 64 and every row length a multiple of 256 (whole q4_K
// blocks). From small up, n_head_kv is a multiple of 12, so 2-, 3- and 4-way
// tensor-parallel splits get whole KV-head groups, and n_ff a multiple of
// 3072, so ffn_down's row shards are whole q4_K blocks as well.
Shape preset_shape(Arch arch, Preset preset) {
    struct Dims {
        int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
    };
    static const Dims kPresetDims[] = {
        {256, 2, 4, 2, 768, 4096},       // tiny
        {768, 4, 12, 12, 3072, 4096},    // small
        {1536, 16, 24, 12, 6144, 8192},  // 1b
    };
    const Dims & d = kPresetDims[static_cast<int>(preset)];
    Shape s;
    s.n_embd = d.n_embd;
    s.n_layer = d.n_layer;
    s.n_head = d.n_head;
    s.n_head_kv = d.n_head_kv;
    s.n_ff = d.n_ff;
    s.n_ctx = d.n_ctx;
    const bool qwen = arch != Arch::llama && arch != Arch::phi3 && arch != Arch::gemma2;  // gemma3's are the same
    s.rope_theta = qwen ? 1000000.0 : 10000.0;
    s.rms_eps = qwen ? 1e-6f : 1e-5f;
    if (arch == Arch::gemma3) {
        s.n_swa = 512;
        s.swa_pattern = 6;
    }
    if (arch == Arch::gemma4) {
        s.n_swa = 512;
        s.swa_pattern = 4;
        s.logit_softcap = 30.0;
    }
    if (arch == Arch::gemma2) {
        s.n_swa = 4096;
        s.swa_pattern = 2;
        s.logit_softcap = 30.0;
    }
    if (arch == Arch::qwen3moe || arch == Arch::gpt_oss || has_shared_expert(arch)) {
        s.n_expert = 8;
        s.n_expert_used = arch == Arch::gpt_oss ? 4 : 2;  // gpt-oss routes to 4, as both releases do
        s.n_ff_exp = 768;
    }
    if (has_linear_attention(arch)) {
        // Three linear-attention layers to one of full attention, as the
        // releases; twice as many value heads as key heads (Qwen3.5's 27B has
        // three times, its 35B-A3B twice).
        s.n_layer = std::max<int64_t>(4, s.n_layer);
        s.full_attention_interval = 4;
        s.ssm_d_conv = 4;
    }
    if (arch == Arch::gpt_oss) {
        s.n_swa = 128;
        s.rope_theta = 150000.0;
        s.rms_eps = 1e-5f;
    }
    return s;
}

Shape resolve_shape(Arch arch, Preset preset, const ShapeOverrides & o) {
    check_arch_overrides(arch, o);
    Shape s = preset_shape(arch, preset);
    s.n_embd = o.n_embd.value_or(s.n_embd);
    s.n_layer = o.n_layer.value_or(s.n_layer);
    s.n_head = o.n_head.value_or(s.n_head);
    s.n_head_kv = o.n_head_kv.value_or(s.n_head_kv);
    s.n_ff = o.n_ff.value_or(s.n_ff);
    s.n_ctx = o.n_ctx.value_or(s.n_ctx);
    s.n_swa = o.n_swa.value_or(s.n_swa);
    s.swa_pattern = o.swa_pattern.value_or(s.swa_pattern);
    s.logit_softcap = o.logit_softcap.value_or(s.logit_softcap);
    if (arch == Arch::phi3) {
        s.n_ctx_orig = o.n_ctx_orig.value_or(s.n_ctx);
    }
    s.rope_theta = o.rope_theta.value_or(s.rope_theta);
    s.n_expert = o.n_expert.value_or(s.n_expert);
    s.n_expert_used = o.n_expert_used.value_or(s.n_expert_used);
    s.n_ff_exp = o.n_ff_exp.value_or(s.n_ff_exp);
    if (arch == Arch::llama && s.n_expert > 0) {
        // Mixtral-style: upstream sizes llama's experts by feed_forward_length.
        s.n_expert_used = o.n_expert_used.value_or(std::min<int64_t>(2, s.n_expert));
        s.n_ff_exp = s.n_ff;
    }
    // gemma2's head is always its embedding table, and Gemma 4's releases tie theirs.
    s.tied_output = o.tied_output || arch == Arch::gemma2 || arch == Arch::gemma4;
    s.reranker = o.reranker;
    if (o.head_dim) {
        s.head_dim = *o.head_dim;
    } else {
        require(s.n_head > 0 && s.n_embd % s.n_head == 0, "--n-head (" + std::to_string(s.n_head) +
                                                              ") must divide --n-embd (" + std::to_string(s.n_embd) +
                                                              "), or give --head-dim");
        s.head_dim = s.n_embd / s.n_head;
    }
    if (arch != Arch::phi3) {
        s.n_ctx_orig = s.n_ctx;  // no LongRoPE: written nowhere
    }
    s.n_rot = s.head_dim;
    if (has_linear_attention(arch)) {
        s.ssm_in = o.ssm_in;
        s.full_attention_interval = o.full_attention_interval.value_or(s.full_attention_interval);
        s.ssm_n_group = o.ssm_n_group.value_or(s.n_head_kv);
        s.ssm_dt_rank = o.ssm_dt_rank.value_or(2 * s.ssm_n_group);
        s.ssm_d_state = o.ssm_d_state.value_or(64);
        s.n_rot = s.head_dim / 4 / 2 * 2;  // partial rotary, a quarter of the head as the releases
        s.n_nextn = o.nextn_layers.value_or(0);
    }
    if (arch == Arch::gemma4) {
        // As the releases: global layers' heads twice as large, half as many KV heads.
        s.head_dim_global = o.head_dim_global.value_or(2 * s.head_dim);
        s.n_head_kv_global = o.n_head_kv_global.value_or(std::max<int64_t>(1, s.n_head_kv / 2));
        s.n_embd_per_layer = o.n_embd_per_layer.value_or(0);
        if (s.n_expert > 0) {
            s.n_expert_used = o.n_expert_used.value_or(std::min<int64_t>(2, s.n_expert));
            s.n_ff_exp = o.n_ff_exp.value_or(s.n_ff / 2);
        }
        s.n_kv_shared = o.n_kv_shared.value_or(0);
    }
    validate_shape(arch, s);
    return s;
}

int64_t TensorPlan::n_elements() const {
    int64_t n = 1;
    for (const int64_t d : ne) {
        n *= d;
    }
    return n;
}

// Untied: a unit-variance embedding, and an output head that turns a unit-RMS
// hidden state into logits of spread kLogitSpread. Tied: one matrix serves
// both, with rows of unit norm so the current token's own logit does not
// dominate (a model that copies its input would test little); the final norm
// weight carries the logit scale instead.
std::vector<TensorPlan> plan_tensors(Arch arch, const Shape & s, WeightType type, int64_t n_vocab) {
    TensorPlanner planner(type);
    const float inv_sqrt_embd = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
    // Gemma scales its embeddings by sqrt(n_embd): rows of unit RMS after
    // that, untied; tied, rows of norm 1 / sqrt(n_embd) after it, small
    // beside the post-normed attention and FFN outputs, so that the model
    // does not copy its input, and the final norm makes up for the head.
    const bool gemma = is_gemma(arch);
    const float embd_std =
        s.tied_output ? (gemma ? inv_sqrt_embd * inv_sqrt_embd : inv_sqrt_embd) : (gemma ? inv_sqrt_embd : 1.0f);
    const float head_scale = gemma ? kLogitSpread / inv_sqrt_embd : kLogitSpread;
    planner.embedding("token_embd.weight", {s.n_embd, n_vocab}, embd_std);
    if (arch == Arch::phi3) {
        // LongRoPE, as Phi-3.5 and Phi-4-mini ship it: per-frequency factors
        // within the original context and beyond it.
        planner.norm("rope_factors_long.weight", s.head_dim / 2, 4.0f);
        planner.norm("rope_factors_short.weight", s.head_dim / 2, 1.0f);
    }
    if (arch == Arch::gemma4) {
        // Proportional RoPE on the global layers, as the converter writes it:
        // a quarter of each head rotates, the other frequencies are sent to
        // nothing by a factor of 1e30.
        // Written where some layer is global: upstream loads it with the first.
        const int64_t n = s.head_dim_global / 2, n_rotated = s.head_dim_global / 8;
        std::vector<float> factors(n, 1e30f);
        std::fill(factors.begin(), factors.begin() + n_rotated, 1.0f);
        bool any_global = false;
        for (int64_t il = 0; il < s.n_layer; ++il) any_global |= !is_swa_layer(s, il);
        if (any_global) planner.constant("rope_freqs.weight", std::move(factors));
        if (s.n_embd_per_layer > 0) {
            const int64_t n_pl = s.n_embd_per_layer * s.n_layer;
            planner.embedding("per_layer_token_embd.weight", {n_pl, n_vocab}, 1.0f);
            planner.matrix("per_layer_model_proj.weight", {s.n_embd, n_pl});
            planner.norm("per_layer_proj_norm.weight", s.n_embd_per_layer);
        }
    }
    for (int64_t il = 0; il < s.n_layer; ++il) {
        plan_attention(planner, arch, s, il);
        plan_feed_forward(planner, arch, s, il);
    }
    for (int64_t il = s.n_layer; il < s.n_layer + s.n_nextn; ++il) plan_nextn_layer(planner, arch, s, il);
    planner.norm("output_norm.weight", s.n_embd, s.tied_output ? head_scale : 1.0f);
    if (!s.tied_output) {
        planner.embedding("output.weight", {s.n_embd, n_vocab}, kLogitSpread * inv_sqrt_embd);
    }
    // Yes and no about one apart, so that scores spread over (0, 1) rather
    // than pile up at its ends.
    if (s.reranker) planner.embedding("cls.output.weight", {s.n_embd, 2}, 0.5f * inv_sqrt_embd);
    return planner.take();
}

std::string ModelSpec::display_name() const {
    std::string name = std::string("llama-tp random ") + arch_name(arch) + " " + preset_name(preset) + " " +
                       weight_type_name(type) + " seed " + std::to_string(seed);
    return customized ? name + " custom" : name;
}

void set_model_metadata(gguf_context * gguf, const ModelSpec & spec, int64_t n_vocab) {
    const Arch arch = spec.arch;
    const Shape & s = spec.shape;
    gguf_set_val_str(gguf, "general.architecture", arch_name(arch));
    gguf_set_val_str(gguf, "general.type", "model");
    gguf_set_val_str(gguf, "general.name", spec.display_name().c_str());
    gguf_set_val_u32(gguf, "general.file_type", static_cast<uint32_t>(llama_file_type(spec.type)));
    gguf_set_val_u32(gguf, "general.quantization_version", GGML_QNT_VERSION);

    const auto set_u32 = [&](const char * suffix, int64_t value) {
        gguf_set_val_u32(gguf, arch_key(arch, suffix).c_str(), static_cast<uint32_t>(value));
    };
    set_u32("vocab_size", n_vocab);
    set_u32("context_length", s.n_ctx);
    set_u32("embedding_length", s.n_embd);
    set_u32("block_count", s.n_layer + s.n_nextn);
    if (s.n_nextn > 0) set_u32("nextn_predict_layers", s.n_nextn);
    set_u32("feed_forward_length", s.n_ff);
    set_u32("attention.head_count", s.n_head);
    set_u32("attention.head_count_kv", s.n_head_kv);
    set_u32("attention.key_length", s.head_dim);
    set_u32("attention.value_length", s.head_dim);
    set_u32("rope.dimension_count", s.n_rot);
    gguf_set_val_f32(gguf, arch_key(arch, "rope.freq_base").c_str(), static_cast<float>(s.rope_theta));
    gguf_set_val_f32(gguf, arch_key(arch, "attention.layer_norm_rms_epsilon").c_str(), s.rms_eps);
    if (arch == Arch::gpt_oss) {
        set_u32("attention.sliding_window", s.n_swa);
        if (s.swa_pattern > 0) {
            set_u32("attention.sliding_window_pattern", s.swa_pattern);
        }
    }
    if (arch == Arch::gemma2 || arch == Arch::gemma3) {
        set_u32("attention.sliding_window", s.n_swa);
        set_u32("attention.sliding_window_pattern", s.swa_pattern);
        if (arch == Arch::gemma3) {
            gguf_set_val_f32(gguf, arch_key(arch, "rope.freq_base_swa").c_str(), 10000.0f);
        } else {
            gguf_set_val_f32(gguf, arch_key(arch, "attn_logit_softcapping").c_str(), 50.0f);
        }
        if (s.logit_softcap > 0.0) {
            gguf_set_val_f32(gguf, arch_key(arch, "final_logit_softcapping").c_str(),
                             static_cast<float>(s.logit_softcap));
        }
    }
    if (arch == Arch::phi3) {
        // The converter's LongRoPE magnitude factor for n_ctx / n_ctx_orig.
        const double scale = static_cast<double>(s.n_ctx) / static_cast<double>(s.n_ctx_orig);
        const double attn_factor =
            scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(s.n_ctx_orig))) : 1.0;
        set_u32("rope.scaling.original_context_length", s.n_ctx_orig);
        gguf_set_val_f32(gguf, arch_key(arch, "rope.scaling.attn_factor").c_str(), static_cast<float>(attn_factor));
    }
    if (arch == Arch::gemma4) set_gemma4_metadata(gguf, s);
    if (has_linear_attention(arch)) {
        set_u32("full_attention_interval", s.full_attention_interval);
        set_u32("ssm.conv_kernel", s.ssm_d_conv);
        set_u32("ssm.inner_size", s.ssm_dt_rank * s.ssm_d_state);
        set_u32("ssm.state_size", s.ssm_d_state);
        set_u32("ssm.time_step_rank", s.ssm_dt_rank);
        set_u32("ssm.group_count", s.ssm_n_group);
    }
    if (arch == Arch::qwen35 || arch == Arch::qwen35moe) {
        // Interleaved M-RoPE's sections over the rotated pairs (text, height,
        // width, none), pair i in section i % 3 as the releases' [11, 11, 10,
        // 0]: text tokens get one position in all three, which is plain NeoX
        // RoPE. qwen3next's RoPE is NeoX's.
        const int32_t pairs = static_cast<int32_t>(s.n_rot / 2);
        const int32_t sections[4] = {(pairs + 2) / 3, (pairs + 1) / 3, pairs / 3, 0};
        gguf_set_arr_data(gguf, arch_key(arch, "rope.dimension_sections").c_str(), GGUF_TYPE_INT32, sections, 4);
    }
    if (s.reranker) {
        set_u32("pooling_type", 4);  // LLAMA_POOLING_TYPE_RANK
        const char * labels[] = {"yes", "no"};
        gguf_set_arr_str(gguf, arch_key(arch, "classifier.output_labels").c_str(), labels, 2);
        // The prompt a query and a document fill, in Qwen3-Reranker's turn format.
        gguf_set_val_str(gguf, "tokenizer.chat_template.rerank",
                         "<|im_start|>user\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
                         "<|im_start|>assistant\n");
    }
    if (has_experts(s)) {
        set_u32("expert_count", s.n_expert);
        set_u32("expert_used_count", s.n_expert_used);
        // llama's experts are feed_forward_length wide; upstream's converter writes no width of their own.
        if (arch != Arch::llama) {
            set_u32("expert_feed_forward_length", s.n_ff_exp);
        }
        if (has_shared_expert(arch)) set_u32("expert_shared_feed_forward_length", s.n_ff_exp);
    }
}

}  // namespace llama_tp::make_model
