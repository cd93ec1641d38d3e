#pragma once
// What model to generate: architecture, size preset, weight type, the shape
// after overrides, and the list of tensors (names, shapes, storage types and
// initial distributions) that upstream libllama expects for that architecture.

#include "ggml.h"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

struct gguf_context;

namespace llama_tp::make_model {

// Bad command-line input: the tool prints the message and usage, exits 2.
class UsageError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// A file that cannot be read or written: the tool prints the message, exits 1.
class IoError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

enum class Arch {
    llama,
    qwen2,
    qwen3,
    qwen3moe,
    phi3,
    gemma2,
    gemma3,
    gpt_oss,
    gemma4,
    qwen35,
    qwen35moe,
    qwen3next,
    glm4moe,
    deepseek2
};
enum class Preset { tiny, small, b1 };
enum class WeightType { f32, f16, q8_0, q4_0, q4_k, mxfp4 };

const char * arch_name(Arch arch);
const char * preset_name(Preset preset);
const char * weight_type_name(WeightType type);
Arch parse_arch(const std::string & text);
Preset parse_preset(const std::string & text);
WeightType parse_weight_type(const std::string & text);

// File name of the vocabulary GGUF (from upstream's models/ folder) an architecture uses by default.
const char * default_vocab_file(Arch arch);
// File name of the chat template (from upstream's models/templates/) an
// architecture's models get by default; nullptr: the vocabulary's own.
const char * default_chat_template_file(Arch arch);

struct Shape {
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;  // 0 until resolved: then n_embd / n_head unless overridden
    int64_t n_ff = 0;
    int64_t n_ctx = 0;
    int64_t n_ctx_orig = 0;  // phi3's LongRoPE: the original context (0 until resolved: then n_ctx)
    double rope_theta = 0.0;
    float rms_eps = 0.0f;
    int64_t n_expert = 0;  // MoE fields: zero for dense layers
    int64_t n_expert_used = 0;
    int64_t n_ff_exp = 0;
    int64_t n_swa = 0;           // gemma3, gpt-oss: sliding window (0: every layer global)
    int64_t swa_pattern = 0;     // every swa_pattern-th layer is global (0: the architecture's default)
    double logit_softcap = 0.0;  // gemma3: final logit soft-cap (0: none)
    bool tied_output = false;
    // qwen3: a reranker, as upstream converts Qwen3-Reranker: rank pooling,
    // a two-row classification head (cls.output.weight: "yes", "no") and a
    // rerank prompt template.
    bool reranker = false;
    // gemma4: global (not sliding) layers' head size and KV heads (their
    // values are their keys), per-layer token embeddings' width (0: none),
    // and the last layers that share an earlier layer's KV cache (their FFN
    // twice as wide).
    int64_t head_dim_global = 0;
    int64_t n_head_kv_global = 0;
    int64_t n_embd_per_layer = 0;
    int64_t n_kv_shared = 0;
    // qwen35, qwen35moe, qwen3next: every full_attention_interval-th layer is
    // gated full attention, the others linear attention (Gated DeltaNet) of
    // ssm_n_group key heads and ssm_dt_rank value heads, each ssm_d_state
    // wide, through a causal convolution of ssm_d_conv taps. Its full
    // attention rotates n_rot of a head's dimensions. qwen3next: ssm_in
    // writes q, k, v and the gate as one matrix, as its early files.
    int64_t full_attention_interval = 0;
    int64_t ssm_n_group = 0;
    int64_t ssm_dt_rank = 0;
    int64_t ssm_d_state = 0;
    int64_t ssm_d_conv = 0;
    bool ssm_in = false;
    int64_t n_rot = 0;  // 0 until resolved: then head_dim, or a quarter of it (qwen35)
    // Multi-token-prediction layers after the n_layer of the model
    // (nextn_predict_layers, qwen35, qwen35moe, qwen3next): each a gated
    // full-attention layer with its FFN, and the projection of the hidden
    // state beside the next token's embedding (nextn.eh_proj) with their norms.
    int64_t n_nextn = 0;
    // glm4moe: the first n_dense_lead layers a dense FFN (--n-ff wide), the
    // others routed experts beside n_expert_shared shared ones (one matrix
    // set n_expert_shared * n_ff_exp wide); a part of each head rotated.
    int64_t n_dense_lead = 0;
    int64_t n_expert_shared = 0;
    // deepseek2 (also leading dense layers and shared experts): latent
    // attention with queries through a q_lora_rank pair (0: a plain
    // attn_q, as V2-Lite), keys and values from a kv_lora_rank latent; a
    // head's query/key width is head_dim (its last n_rot rotated), its value
    // width v_head_dim. Routed experts picked in n_expert_groups groups of
    // which n_group_used may be picked (V3), by sigmoid scores plus a
    // selection bias, or by softmax scores without one (softmax_routing, V2).
    int64_t q_lora_rank = 0;
    int64_t kv_lora_rank = 0;
    int64_t v_head_dim = 0;
    int64_t n_expert_groups = 1;
    int64_t n_group_used = 1;
    bool softmax_routing = false;
    // The older files' expanded form: attn_kv_b (each head's key and value
    // rows) instead of attn_k_b and attn_v_b, no *_mla keys.
    bool latent_expanded = false;
    // Every layer's output projections zero and the final norms one: the
    // next token follows from the last alone (the head over its normed
    // embedding). A prediction layer then projects the embedding alone
    // (eh_proj the identity on it), so that it proposes the model's own
    // next token: a model whose drafts are confirmed, for speculative
    // decoding's checks and benchmarks.
    bool bigram = false;
};

// Command-line overrides of single shape fields.
struct ShapeOverrides {
    std::optional<int64_t> n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx, n_ctx_orig;
    std::optional<double> rope_theta;
    std::optional<int64_t> n_expert, n_expert_used, n_ff_exp;
    std::optional<int64_t> n_swa, swa_pattern;
    std::optional<double> logit_softcap;
    std::optional<int64_t> head_dim_global, n_head_kv_global, n_embd_per_layer, n_kv_shared;
    std::optional<int64_t> full_attention_interval, ssm_n_group, ssm_dt_rank, ssm_d_state, nextn_layers;
    std::optional<int64_t> n_dense_lead;
    std::optional<int64_t> q_lora_rank, kv_lora_rank, rope_dim, v_head_dim, n_expert_groups, n_group_used;
    bool softmax_routing = false;
    bool latent_expanded = false;
    bool bigram = false;
    bool tied_output = false;
    bool reranker = false;
    bool ssm_in = false;

    bool any() const;
};

// Mixture-of-experts layers: qwen3moe, or llama with --n-expert (Mixtral).
bool has_experts(const Shape & shape);
// Whether layer il slides: all but every swa_pattern-th (gemma2/3/4, gpt-oss).
bool is_swa_layer(const Shape & shape, int64_t il);
// Whether layer il is linear attention: all but every full_attention_interval-th (qwen35, qwen3next).
bool is_linear_attention_layer(const Shape & shape, int64_t il);

Shape preset_shape(Arch arch, Preset preset);
// Applies overrides, fills in head_dim, and checks the result; throws UsageError.
Shape resolve_shape(Arch arch, Preset preset, const ShapeOverrides & overrides);

struct TensorPlan {
    std::string name;
    std::vector<int64_t> ne;  // ggml order: ne[0] is the row length
    ggml_type type = GGML_TYPE_F32;
    float mean = 0.0f;
    float stddev = 0.0f;
    std::string fallback;       // why the requested type was not usable; empty when it was
    std::vector<float> values;  // the exact values (gemma4's rope_freqs); empty: drawn

    int64_t n_elements() const;
    int64_t row_length() const { return ne[0]; }
    int64_t n_rows() const { return n_elements() / ne[0]; }
};

std::vector<TensorPlan> plan_tensors(Arch arch, const Shape & shape, WeightType type, int64_t n_vocab);

struct ModelSpec {
    Arch arch = Arch::llama;
    Preset preset = Preset::tiny;
    WeightType type = WeightType::f16;
    uint64_t seed = 1;
    Shape shape;
    bool customized = false;               // some shape field was overridden
    std::string chat_template;             // tokenizer.chat_template; empty: the vocabulary's, if any
    std::vector<int32_t> suppress_tokens;  // tokenizer.ggml.suppress_tokens (never sampled); empty: none

    std::string display_name() const;
};

// Architecture hyperparameters and general.* keys, under the GGUF key names upstream reads.
void set_model_metadata(gguf_context * gguf, const ModelSpec & spec, int64_t n_vocab);

}  // namespace llama_tp::make_model
