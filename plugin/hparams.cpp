#include "plugin/hparams.h"

#include "plugin/error.h"
#include "plugin/gguf_file.h"

#include "ggml.h"

#include <cmath>

namespace llama_tp {

namespace {

Arch parse_arch(const GgufFile & file, const std::string & name) {
    if (name == "llama") return Arch::Llama;
    if (name == "qwen2") return Arch::Qwen2;
    if (name == "qwen3") return Arch::Qwen3;
    if (name == "qwen3moe") return Arch::Qwen3Moe;
    if (name == "phi3") return Arch::Phi3;
    if (name == "gemma2") return Arch::Gemma2;
    if (name == "gemma3") return Arch::Gemma3;
    if (name == "gpt-oss") return Arch::GptOss;
    throw Error("model file '" + file.path() + "': architecture '" + name +
                "' is not supported (supported: llama, qwen2, qwen3, qwen3moe, phi3, gemma2, gemma3, gpt-oss)");
}

void require_positive(const GgufFile & file, const char * what, int64_t v) {
    if (v <= 0)
        throw Error("model file '" + file.path() + "': " + what + " must be positive, got " + std::to_string(v));
}

void read_rope(const GgufFile & file, const std::string & a, HParams & hp) {
    // The Qwen, Phi-3 and Gemma families rotate the two halves of each head (NeoX style).
    hp.rope_type = hp.arch == Arch::Llama ? GGML_ROPE_TYPE_NORMAL : GGML_ROPE_TYPE_NEOX;
    hp.n_rot = (int32_t) file.get_int(a + ".rope.dimension_count", hp.head_dim);
    hp.rope_freq_base_train = (float) file.get_float(a + ".rope.freq_base", 10000.0);
    hp.n_ctx_orig_train = (int32_t) file.get_int(a + ".rope.scaling.original_context_length", hp.n_ctx_train);
    const std::string scaling = file.get_string(a + ".rope.scaling.type", "none");
    const std::optional<RopeScaling> type = rope_scaling_from_name(scaling);
    if (!type) throw Error("model file '" + file.path() + "': RoPE scaling type '" + scaling + "' is not supported");
    hp.rope_scaling_train = *type;
    const float factor = (float) file.get_float(a + ".rope.scaling.factor", 0.0);
    hp.rope_freq_scale_train = factor == 0.0f ? 1.0f : 1.0f / factor;
    // A factor on every rotation's magnitude whatever the scaling (LongRoPE
    // models carry one, with no scaling type).
    hp.rope_attn_factor = (float) file.get_float(a + ".rope.scaling.attn_factor", 1.0);
    if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
        throw Error("model file '" + file.path() + "': rope.dimension_count " + std::to_string(hp.n_rot) +
                    " does not fit head size " + std::to_string(hp.head_dim));
    }
    apply_rope_overrides(hp, RopeOverrides{});
}

// qwen3moe and gpt-oss always have experts, of their own width; llama has
// them where the file counts them (Mixtral), each as wide as feed_forward_length.
void read_moe(const GgufFile & file, const std::string & a, HParams & hp) {
    const bool required = hp.arch == Arch::Qwen3Moe || hp.arch == Arch::GptOss;
    hp.n_expert = (int32_t) (required ? file.get_int(a + ".expert_count") : file.get_int(a + ".expert_count", 0));
    if (hp.n_expert == 0 && !required) return;
    hp.n_expert_used = (int32_t) file.get_int(a + ".expert_used_count");
    hp.n_ff_exp = (int32_t) (required ? file.get_int(a + ".expert_feed_forward_length") : hp.n_ff);
    hp.expert_weights_scale = (float) file.get_float(a + ".expert_weights_scale", 0.0);
    require_positive(file, "expert_count", hp.n_expert);
    require_positive(file, "expert_used_count", hp.n_expert_used);
    require_positive(file, "expert_feed_forward_length", hp.n_ff_exp);
    if (hp.n_expert_used > hp.n_expert) {
        throw Error("model file '" + file.path() + "': expert_used_count " + std::to_string(hp.n_expert_used) +
                    " exceeds expert_count " + std::to_string(hp.n_expert));
    }
}

// Which layers slide: a per-layer bool array, or a period P whose last layer
// is global (layers il with il % P < P - 1 slide), default_period where absent.
std::vector<bool> read_swa_layers(const GgufFile & file, const std::string & a, const HParams & hp,
                                  int64_t default_period) {
    const std::string key = a + ".attention.sliding_window_pattern";
    std::vector<bool> layers(hp.n_layer);
    if (file.is_array(key)) {
        const std::vector<int64_t> v = file.get_int_array(key);
        if ((int32_t) v.size() != hp.n_layer) {
            throw Error("model file '" + file.path() + "': " + key + " has " + std::to_string(v.size()) +
                        " entries for " + std::to_string(hp.n_layer) + " layers");
        }
        for (int il = 0; il < hp.n_layer; ++il) layers[il] = v[il] != 0;
        return layers;
    }
    const int64_t period = file.get_int(key, default_period);
    for (int il = 0; il < hp.n_layer; ++il) layers[il] = period == 0 || il % period < period - 1;
    return layers;
}

// The sliding window (window 0: none), which layers slide, and their RoPE:
// base_swa where the file gives none, the other layers' frequency scale or none.
struct SlidingWindowDefaults {
    int64_t window;  // -1: the file must give it
    int64_t period;
    double base_swa;
    bool scaled;
};

void read_sliding_window(const GgufFile & file, const std::string & a, HParams & hp, SlidingWindowDefaults d) {
    const std::string key = a + ".attention.sliding_window";
    hp.n_swa = (int32_t) (d.window < 0 ? file.get_int(key) : file.get_int(key, d.window));
    if (hp.n_swa < 0 || (d.window < 0 && hp.n_swa == 0)) require_positive(file, "attention.sliding_window", hp.n_swa);
    if (hp.n_swa == 0) return;
    hp.swa_layers = read_swa_layers(file, a, hp, d.period);
    hp.rope_freq_base_swa = (float) file.get_float(a + ".rope.freq_base_swa", d.base_swa);
    hp.rope_freq_scale_swa = d.scaled ? hp.rope_freq_scale : 1.0f;
}

// Gemma 2 and 3, as upstream reads them: sliding-window layers (gemma3: 5 of
// every 6 and a RoPE base of their own, gemma2: every other and a window of
// 4096 unless the file says), the query scale (the 27B models, 46 and 62
// layers, scale by n_embd / n_head) and the soft-caps (gemma2's default to
// 50 on attention scores and 30 on logits).
void read_gemma(const GgufFile & file, const std::string & a, HParams & hp) {
    const bool v2 = hp.arch == Arch::Gemma2;
    read_sliding_window(
        file, a, hp,
        v2 ? SlidingWindowDefaults{4096, 2, hp.rope_freq_base, true} : SlidingWindowDefaults{0, 6, 10000.0, false});
    const bool is_27b = hp.n_layer == (v2 ? 46 : 62);
    hp.query_scale = 1.0f / std::sqrt((float) (is_27b ? hp.n_embd / hp.n_head : hp.head_dim));
    hp.final_logit_softcap = (float) file.get_float(a + ".final_logit_softcapping", v2 ? 30.0 : 0.0);
    if (v2) hp.attn_logit_softcap = (float) file.get_float(a + ".attn_logit_softcapping", 50.0);
}

}  // namespace

HParams read_hparams(const GgufFile & file) {
    HParams hp;
    hp.arch_name = file.get_string("general.architecture");
    hp.arch = parse_arch(file, hp.arch_name);
    const std::string & a = hp.arch_name;

    hp.n_embd = (int32_t) file.get_int(a + ".embedding_length");
    hp.n_layer = (int32_t) file.get_int(a + ".block_count");
    const bool experts_only = hp.arch == Arch::Qwen3Moe || hp.arch == Arch::GptOss;
    hp.n_ff = (int32_t) file.get_int(a + ".feed_forward_length", experts_only ? 1 : -1);
    hp.n_head = (int32_t) file.get_int(a + ".attention.head_count");
    hp.n_head_kv = (int32_t) file.get_int(a + ".attention.head_count_kv", hp.n_head);
    hp.n_ctx_train = (int32_t) file.get_int(a + ".context_length", 2048);
    hp.rms_eps = (float) file.get_float(a + ".attention.layer_norm_rms_epsilon", 1e-5);
    for (auto [what, v] : {std::pair<const char *, int64_t>{"embedding_length", hp.n_embd},
                           {"block_count", hp.n_layer},
                           {"feed_forward_length", hp.n_ff},
                           {"attention.head_count", hp.n_head},
                           {"attention.head_count_kv", hp.n_head_kv}}) {
        require_positive(file, what, v);
    }
    if (hp.n_head % hp.n_head_kv != 0) {
        throw Error("model file '" + file.path() + "': head_count " + std::to_string(hp.n_head) +
                    " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
    }
    hp.head_dim = (int32_t) file.get_int(a + ".attention.key_length", hp.n_embd / hp.n_head);
    const int64_t v_len = file.get_int(a + ".attention.value_length", hp.head_dim);
    if (v_len != hp.head_dim) {
        throw Error("model file '" + file.path() + "': key_length != value_length is not supported");
    }

    if (hp.arch == Arch::Llama || experts_only) read_moe(file, a, hp);

    const ggml_tensor * embd = file.find_tensor("token_embd.weight");
    if (!embd) throw Error("model file '" + file.path() + "': missing tensor 'token_embd.weight'");
    hp.n_vocab = (int32_t) file.get_int(a + ".vocab_size", embd->ne[1]);
    read_rope(file, a, hp);
    if (hp.arch == Arch::Phi3) hp.query_scale = 1.0f / std::sqrt((float) hp.head_dim);
    if (hp.is_gemma()) read_gemma(file, a, hp);
    // gpt-oss: every other layer slides (the first does), rotating as the others do.
    if (hp.is_gpt_oss()) read_sliding_window(file, a, hp, {-1, 2, hp.rope_freq_base, true});
    return hp;
}

std::optional<RopeScaling> rope_scaling_from_name(const std::string & name) {
    if (name == "none") return RopeScaling::None;
    if (name == "linear") return RopeScaling::Linear;
    if (name == "yarn") return RopeScaling::Yarn;
    return std::nullopt;
}

void apply_rope_overrides(HParams & hp, const RopeOverrides & o) {
    const RopeScaling scaling = o.scaling.value_or(hp.rope_scaling_train);
    hp.rope_freq_base = o.freq_base != 0.0f ? o.freq_base : hp.rope_freq_base_train;
    hp.rope_freq_scale = o.freq_scale != 0.0f ? o.freq_scale : hp.rope_freq_scale_train;
    if (scaling == RopeScaling::None) hp.rope_freq_scale = 1.0f;
    hp.rope_n_ctx_orig = o.yarn_orig_ctx != 0 ? o.yarn_orig_ctx : hp.n_ctx_orig_train;
    hp.yarn_beta_fast = o.yarn_beta_fast >= 0.0f ? o.yarn_beta_fast : 32.0f;
    hp.yarn_beta_slow = o.yarn_beta_slow >= 0.0f ? o.yarn_beta_slow : 1.0f;
    hp.yarn_ext_factor = o.yarn_ext_factor >= 0.0f ? o.yarn_ext_factor : scaling == RopeScaling::Yarn ? 1.0f : 0.0f;
    hp.yarn_attn_factor = o.yarn_attn_factor >= 0.0f ? o.yarn_attn_factor : 1.0f;
    if (hp.yarn_ext_factor != 0.0f) {
        // ggml's rope multiplies by 1 + 0.1 ln(1 / scale) where it
        // extrapolates; this factor is the magnitude YaRN asks for divided by
        // that, in upstream's float steps so that the products match its.
        const float factor = 1.0f / hp.rope_freq_scale;
        hp.yarn_attn_factor = factor <= 1.0f ? 1.0f : 0.1f * std::log(factor) + 1.0f;
        hp.yarn_attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
    }
    hp.yarn_attn_factor *= hp.rope_attn_factor;
}

}  // namespace llama_tp
