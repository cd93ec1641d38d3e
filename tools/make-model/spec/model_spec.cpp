#include "tools/make-model/spec/model_spec.h"

#include "tools/make-model/spec/arch_traits.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace llama_tp::make_model {
namespace {

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

const char * const kArchNames[] = {"llama",   "qwen2",  "qwen3",  "qwen3moe",  "phi3",      "gemma2",  "gemma3",
                                   "gpt-oss", "gemma4", "qwen35", "qwen35moe", "qwen3next", "glm4moe", "deepseek2"};
const char * const kPresetNames[] = {"tiny", "small", "1b"};
const char * const kTypeNames[] = {"f32", "f16", "q8_0", "q4_0", "q4_k", "mxfp4"};

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
    }
    if (has_nextn_layers(arch)) {
        require(s.n_nextn <= 1, "--nextn-layers must be 1 (upstream's multi-token prediction reads one layer), got " +
                                    std::to_string(s.n_nextn));
    }
    if (has_leading_dense_layers(arch)) {
        require(s.n_dense_lead >= 0 && s.n_dense_lead <= s.n_layer,
                "--leading-dense-layers must be between 0 and --n-layer (" + std::to_string(s.n_layer) + ")");
    }
    if (arch == Arch::glm4moe) {
        require(s.head_dim % 4 == 0, "glm4moe rotates half of each head: --head-dim must be a multiple of 4");
    }
    if (arch == Arch::deepseek2) {
        require(s.q_lora_rank >= 0 && s.q_lora_rank <= kMaxDim, "--q-lora-rank must be between 0 and 2^24");
        require_in_range(s.kv_lora_rank, "--kv-lora-rank");
        require_in_range(s.v_head_dim, "--v-head-dim");
        require(s.n_rot % 2 == 0 && s.n_rot > 0 && s.n_rot < s.head_dim,
                "--rope-dim must be even and below --head-dim (" + std::to_string(s.head_dim) + "), got " +
                    std::to_string(s.n_rot));
        require(s.n_expert_groups >= 1 && s.n_expert % s.n_expert_groups == 0 &&
                    (s.n_expert_groups == 1 || s.n_expert / s.n_expert_groups >= 2) && s.n_group_used >= 1 &&
                    s.n_group_used <= s.n_expert_groups &&
                    s.n_group_used * (s.n_expert / s.n_expert_groups) >= s.n_expert_used,
                "--expert-groups must divide --n-expert into groups of 2 or more, and --expert-groups-used of them "
                "must hold at least --n-expert-used experts");
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
            "--n-expert, --n-expert-used and --n-ff-exp apply to llama, qwen3moe, qwen35moe, qwen3next, glm4moe, "
            "deepseek2, gemma4 and gpt-oss, not " +
            name);
    }
    if (arch != Arch::deepseek2 && (o.q_lora_rank || o.kv_lora_rank || o.rope_dim || o.v_head_dim ||
                                    o.n_expert_groups || o.n_group_used || o.softmax_routing || o.latent_expanded)) {
        throw UsageError(
            "--q-lora-rank, --kv-lora-rank, --rope-dim, --v-head-dim, --expert-groups, "
            "--expert-groups-used, --softmax-routing and --expanded-latent apply to deepseek2 only, not " +
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
    if (!has_nextn_layers(arch) && o.nextn_layers) {
        throw UsageError("--nextn-layers applies to qwen35, qwen35moe, qwen3next, glm4moe and deepseek2 only, not " +
                         name);
    }
    if (!has_leading_dense_layers(arch) && o.n_dense_lead) {
        throw UsageError("--leading-dense-layers applies to glm4moe and deepseek2 only, not " + name);
    }
    if (arch != Arch::qwen3next && o.ssm_in) {
        throw UsageError("--ssm-in applies to qwen3next only, not " + name);
    }
    if (arch != Arch::qwen3 && o.reranker) {
        throw UsageError("--reranker applies to qwen3 only (Qwen3-Reranker), not " + name);
    }
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
        case Arch::deepseek2:  // DeepSeek LLM's byte-level BPE (V3's own is not in the pinned tree)
            return "ggml-vocab-deepseek-llm.gguf";
        default:
            return "ggml-vocab-qwen2.gguf";
    }
}

const char * default_chat_template_file(Arch arch) {
    if (arch == Arch::gpt_oss) return "openai-gpt-oss-120b.jinja";  // harmony
    if (arch == Arch::glm4moe) return "GLM-4.6.jinja";              // <think> reasoning, <tool_call> with <arg_key>s
    if (arch == Arch::deepseek2) return "deepseek-ai-DeepSeek-V3.1.jinja";  // thinking switch, DeepSeek's calls
    return nullptr;
}

bool ShapeOverrides::any() const {
    return n_embd || n_layer || n_head || n_head_kv || head_dim || n_ff || n_ctx || n_ctx_orig || rope_theta || n_swa ||
           swa_pattern || logit_softcap || n_expert || n_expert_used || n_ff_exp || tied_output || reranker ||
           head_dim_global || n_head_kv_global || n_embd_per_layer || n_kv_shared || full_attention_interval ||
           ssm_n_group || ssm_dt_rank || ssm_d_state || ssm_in || nextn_layers || n_dense_lead || q_lora_rank ||
           kv_lora_rank || rope_dim || v_head_dim || n_expert_groups || n_group_used || softmax_routing ||
           latent_expanded || bigram;
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
    if (arch == Arch::glm4moe) {
        // As GLM-4.5: the first layer dense, eight times as wide as an expert;
        // one shared expert; routed weights normalised and scaled by 2.5.
        s.n_ff = 8 * s.n_ff_exp;
        s.n_dense_lead = 1;
        s.n_expert_shared = 1;
    }
    if (arch == Arch::deepseek2) {
        // DeepSeek V3's ratios: a head's query/key 3 RoPE parts wide (128 +
        // 64), values as wide as its unrotated part, the latent 8 RoPE parts
        // (512), the queries' rank 3 latents (1536); the first layer dense,
        // nine experts wide; one shared expert; 8 experts in 4 groups of
        // which 2 may be picked (256 in 8, 4).
        const int64_t rope = preset == Preset::tiny ? 16 : 32;
        s.head_dim = 3 * rope;
        s.n_rot = rope;
        s.v_head_dim = 2 * rope;
        s.kv_lora_rank = 8 * rope;
        s.q_lora_rank = 3 * s.kv_lora_rank;
        s.n_ff = 9 * s.n_ff_exp;
        s.n_dense_lead = 1;
        s.n_expert_shared = 1;
        s.n_expert_groups = 4;
        s.n_group_used = 2;
        s.n_head_kv = 1;  // one latent, as the converter writes it
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
    } else if (arch == Arch::deepseek2) {
        // The preset's latent-attention widths.
    } else {
        require(s.n_head > 0 && s.n_embd % s.n_head == 0, "--n-head (" + std::to_string(s.n_head) +
                                                              ") must divide --n-embd (" + std::to_string(s.n_embd) +
                                                              "), or give --head-dim");
        s.head_dim = s.n_embd / s.n_head;
    }
    if (arch != Arch::phi3) {
        s.n_ctx_orig = s.n_ctx;  // no LongRoPE: written nowhere
    }
    if (arch != Arch::deepseek2) s.n_rot = s.head_dim;
    if (has_linear_attention(arch)) {
        s.ssm_in = o.ssm_in;
        s.full_attention_interval = o.full_attention_interval.value_or(s.full_attention_interval);
        s.ssm_n_group = o.ssm_n_group.value_or(s.n_head_kv);
        s.ssm_dt_rank = o.ssm_dt_rank.value_or(2 * s.ssm_n_group);
        s.ssm_d_state = o.ssm_d_state.value_or(64);
        s.n_rot = s.head_dim / 4 / 2 * 2;  // partial rotary, a quarter of the head as the releases
    }
    if (has_nextn_layers(arch)) s.n_nextn = o.nextn_layers.value_or(0);
    s.bigram = o.bigram;
    if (arch == Arch::glm4moe) s.n_rot = s.head_dim / 2;  // partial rotary, half the head as the releases
    if (has_leading_dense_layers(arch)) s.n_dense_lead = o.n_dense_lead.value_or(s.n_dense_lead);
    if (arch == Arch::deepseek2) {
        s.n_head_kv = 1;
        s.n_rot = o.rope_dim.value_or(s.n_rot);
        s.q_lora_rank = o.q_lora_rank.value_or(s.q_lora_rank);
        s.kv_lora_rank = o.kv_lora_rank.value_or(s.kv_lora_rank);
        s.v_head_dim = o.v_head_dim.value_or(s.v_head_dim);
        s.n_expert_groups = o.n_expert_groups.value_or(s.n_expert_groups);
        s.n_group_used = o.n_group_used.value_or(s.n_group_used);
        s.softmax_routing = o.softmax_routing;
        s.latent_expanded = o.latent_expanded;
        if (s.latent_expanded) s.n_head_kv = s.n_head;  // every head's key and value, as those files say
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
std::string ModelSpec::display_name() const {
    std::string name = std::string("llama-tp random ") + arch_name(arch) + " " + preset_name(preset) + " " +
                       weight_type_name(type) + " seed " + std::to_string(seed);
    return customized ? name + " custom" : name;
}
}  // namespace llama_tp::make_model
