// The tensors of a generated model, named, shaped and typed as upstream's
// converters write them, each with the distribution of its random values.
#include "tools/make-model/spec/model_spec.h"

#include "tools/make-model/spec/arch_traits.h"

#include <cmath>
#include <cstring>
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

// deepseek2's latent attention, as upstream's converter writes it: the
// queries' low-rank pair and its norm (or a plain attn_q), the latent and
// its RoPE part in one projection, the latent's norm, and per head the
// latent's expansion to the unrotated key part (attn_k_b: [nope, latent])
// and to the value (attn_v_b: [latent, value]); in older files' expanded
// form both in one attn_kv_b, each head's key rows then its value rows.
void plan_latent_attention(TensorPlanner & planner, const Shape & s, int64_t il) {
    const int64_t nope = s.head_dim - s.n_rot;
    planner.norm(layer_tensor(il, "attn_norm.weight"), s.n_embd);
    if (s.q_lora_rank > 0) {
        planner.matrix(layer_tensor(il, "attn_q_a.weight"), {s.n_embd, s.q_lora_rank});
        planner.norm(layer_tensor(il, "attn_q_a_norm.weight"), s.q_lora_rank);
        planner.matrix(layer_tensor(il, "attn_q_b.weight"), {s.q_lora_rank, s.n_head * s.head_dim});
    } else {
        planner.matrix(layer_tensor(il, "attn_q.weight"), {s.n_embd, s.n_head * s.head_dim});
    }
    planner.matrix(layer_tensor(il, "attn_kv_a_mqa.weight"), {s.n_embd, s.kv_lora_rank + s.n_rot});
    planner.norm(layer_tensor(il, "attn_kv_a_norm.weight"), s.kv_lora_rank);
    if (s.latent_expanded) {
        planner.matrix(layer_tensor(il, "attn_kv_b.weight"), {s.kv_lora_rank, s.n_head * (nope + s.v_head_dim)});
    } else {
        planner.matrix(layer_tensor(il, "attn_k_b.weight"), {nope, s.kv_lora_rank, s.n_head});
        planner.matrix(layer_tensor(il, "attn_v_b.weight"), {s.kv_lora_rank, s.v_head_dim, s.n_head});
    }
    planner.matrix(layer_tensor(il, "attn_output.weight"), {s.n_head * s.v_head_dim, s.n_embd});
}

void plan_attention(TensorPlanner & planner, Arch arch, const Shape & s, int64_t il) {
    if (arch == Arch::gemma4) return plan_gemma4_attention(planner, s, il);
    if (arch == Arch::deepseek2) return plan_latent_attention(planner, s, il);
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
    if (arch == Arch::qwen2 || arch == Arch::gpt_oss || arch == Arch::glm4moe) {
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
    if (arch == Arch::qwen3 || arch == Arch::qwen3moe || arch == Arch::gemma3 || arch == Arch::glm4moe) {
        planner.norm(layer_tensor(il, "attn_q_norm.weight"), s.head_dim);
        planner.norm(layer_tensor(il, "attn_k_norm.weight"), s.head_dim);
    }
}

void plan_feed_forward(TensorPlanner & planner, Arch arch, const Shape & s, int64_t il) {
    if (arch == Arch::gemma4) return plan_gemma4_feed_forward(planner, s, il);
    // gpt-oss, qwen35, qwen3next and glm4moe name their FFN's input norm post_attention_norm.
    const bool post = arch == Arch::gpt_oss || has_linear_attention(arch) || arch == Arch::glm4moe;
    planner.norm(layer_tensor(il, post ? "post_attention_norm.weight" : "ffn_norm.weight"), s.n_embd);
    if (arch == Arch::phi3) {
        // Gate and up fused in one matrix, gate first.
        planner.matrix(layer_tensor(il, "ffn_up.weight"), {s.n_embd, 2 * s.n_ff});
        planner.matrix(layer_tensor(il, "ffn_down.weight"), {s.n_ff, s.n_embd});
        return;
    }
    // glm4moe's and deepseek2's leading layers (and their multi-token-
    // prediction layer's experts, as the trunk's).
    const bool dense = has_leading_dense_layers(arch) && il < s.n_dense_lead;
    if (has_experts(s) && !dense) {
        // gpt-oss: a bias on the router and on every expert's matrices.
        const bool biased = arch == Arch::gpt_oss;
        planner.router(layer_tensor(il, "ffn_gate_inp.weight"), {s.n_embd, s.n_expert});
        if (biased) planner.bias(layer_tensor(il, "ffn_gate_inp.bias"), s.n_expert);
        // glm4moe, deepseek2 (V3): a bias per expert on the scores that pick them.
        if (arch == Arch::glm4moe || (arch == Arch::deepseek2 && !s.softmax_routing)) {
            planner.bias(layer_tensor(il, "exp_probs_b.bias"), s.n_expert);
        }
        planner.matrix(layer_tensor(il, "ffn_gate_exps.weight"), {s.n_embd, s.n_ff_exp, s.n_expert});
        if (biased) planner.bias(layer_tensor(il, "ffn_gate_exps.bias"), {s.n_ff_exp, s.n_expert});
        planner.matrix(layer_tensor(il, "ffn_up_exps.weight"), {s.n_embd, s.n_ff_exp, s.n_expert});
        if (biased) planner.bias(layer_tensor(il, "ffn_up_exps.bias"), {s.n_ff_exp, s.n_expert});
        planner.matrix(layer_tensor(il, "ffn_down_exps.weight"), {s.n_ff_exp, s.n_embd, s.n_expert});
        if (biased) planner.bias(layer_tensor(il, "ffn_down_exps.bias"), {s.n_embd, s.n_expert});
        if (has_shared_expert(arch)) {
            // A shared expert as wide as a routed one (glm4moe: as
            // n_expert_shared), its gate one logit a token (qwen35moe).
            const int64_t w = has_gated_shared_expert(arch) ? s.n_ff_exp : s.n_expert_shared * s.n_ff_exp;
            if (has_gated_shared_expert(arch))
                planner.router(layer_tensor(il, "ffn_gate_inp_shexp.weight"), {s.n_embd});
            planner.matrix(layer_tensor(il, "ffn_gate_shexp.weight"), {s.n_embd, w});
            planner.matrix(layer_tensor(il, "ffn_up_shexp.weight"), {s.n_embd, w});
            planner.matrix(layer_tensor(il, "ffn_down_shexp.weight"), {w, s.n_embd});
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

bool ends_with(const std::string & s, const char * suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Shape::bigram: what every layer adds is zero and the norms after the
// embedding are one, so the trunk's logits and a prediction layer's are the
// head over the token's normed embedding alike.
void make_bigram(std::vector<TensorPlan> & tensors, int64_t n_embd) {
    for (TensorPlan & t : tensors) {
        const std::string & n = t.name;
        if (ends_with(n, ".attn_output.weight") || ends_with(n, ".ssm_out.weight") ||
            ends_with(n, ".ffn_down.weight") || ends_with(n, ".ffn_down_exps.weight") ||
            ends_with(n, ".ffn_down_shexp.weight")) {
            t.mean = t.stddev = 0.0f;
        } else if (n == "output_norm.weight" || ends_with(n, ".nextn.enorm.weight") ||
                   ends_with(n, ".nextn.shared_head_norm.weight")) {
            t.mean = 1.0f;
            t.stddev = 0.0f;
        } else if (ends_with(n, ".nextn.eh_proj.weight")) {
            t.values.assign((size_t) (2 * n_embd * n_embd), 0.0f);
            for (int64_t r = 0; r < n_embd; ++r) t.values[(size_t) (r * 2 * n_embd + r)] = 1.0f;
        }
    }
}

// A multi-token-prediction layer, as upstream's qwen35 and glm4moe loaders
// read one: the hidden state and the next token's embedding, each normed,
// projected together to n_embd, then a full-attention layer (qwen35's
// gated) with its FFN and a norm before the (shared) output head.
void plan_nextn_layer(TensorPlanner & planner, Arch arch, const Shape & s, int64_t il) {
    planner.matrix(layer_tensor(il, "nextn.eh_proj.weight"), {2 * s.n_embd, s.n_embd});
    planner.norm(layer_tensor(il, "nextn.enorm.weight"), s.n_embd);
    planner.norm(layer_tensor(il, "nextn.hnorm.weight"), s.n_embd);
    if (has_linear_attention(arch)) {
        plan_gated_attention(planner, s, il);
    } else {
        plan_attention(planner, arch, s, il);
    }
    plan_feed_forward(planner, arch, s, il);
    planner.norm(layer_tensor(il, "nextn.shared_head_norm.weight"), s.n_embd);
}
}  // namespace

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
    std::vector<TensorPlan> tensors = planner.take();
    if (s.bigram) make_bigram(tensors, s.n_embd);
    return tensors;
}
}  // namespace llama_tp::make_model
