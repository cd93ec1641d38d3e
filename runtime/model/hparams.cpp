#include "runtime/model/hparams.h"

#include "runtime/error.h"
#include "runtime/model/gguf_file.h"

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
    if (name == "gemma4") return Arch::Gemma4;
    if (name == "gpt-oss") return Arch::GptOss;
    throw Error("model file '" + file.path() + "': architecture '" + name +
                "' is not supported (supported: llama, qwen2, qwen3, qwen3moe, phi3, gemma2, gemma3, gemma4, gpt-oss)");
}

void require_positive(const GgufFile & file, const char * what, int64_t v) {
    if (v <= 0)
        throw Error("model file '" + file.path() + "': " + what + " must be positive, got " + std::to_string(v));
}

void read_rope(const GgufFile & file, const std::string & a, HParams & hp) {
    // The Qwen, Phi-3 and Gemma families rotate the two halves of each head (NeoX style).
    hp.rope_type = hp.arch == Arch::Llama ? GGML_ROPE_TYPE_NORMAL : GGML_ROPE_TYPE_NEOX;
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
    apply_rope_overrides(hp, RopeOverrides{});
}

// A value per layer: an array of n_layer entries, or one value for every
// layer; fallback where the key is absent (none: required).
std::vector<int64_t> per_layer_int(const GgufFile & file, const std::string & key, int32_t n_layer,
                                   std::optional<int64_t> fallback) {
    if (file.is_array(key)) {
        std::vector<int64_t> v = file.get_int_array(key);
        if ((int32_t) v.size() != n_layer) {
            throw Error("model file '" + file.path() + "': " + key + " has " + std::to_string(v.size()) +
                        " entries for " + std::to_string(n_layer) + " layers");
        }
        return v;
    }
    return std::vector<int64_t>(n_layer, fallback ? file.get_int(key, *fallback) : file.get_int(key));
}

// Every layer's shape, as upstream reads it: KV heads and FFN widths per
// layer where the file gives arrays; sliding-window layers with a head size
// and rotated dimensions of their own where it gives the _swa keys.
void read_layer_shapes(const GgufFile & file, const std::string & a, HParams & hp) {
    const bool experts_only = hp.arch == Arch::Qwen3Moe || hp.arch == Arch::GptOss;
    const std::vector<int64_t> n_head_kv = per_layer_int(file, a + ".attention.head_count_kv", hp.n_layer, hp.n_head);
    const std::vector<int64_t> n_ff = per_layer_int(file, a + ".feed_forward_length", hp.n_layer,
                                                    experts_only ? std::optional<int64_t>(1) : std::nullopt);
    const int64_t head_dim = file.get_int(a + ".attention.key_length", hp.n_embd / hp.n_head);
    const int64_t head_dim_swa = file.get_int(a + ".attention.key_length_swa", head_dim);
    const int64_t n_rot = file.get_int(a + ".rope.dimension_count", head_dim);
    const int64_t n_rot_swa = file.get_int(a + ".rope.dimension_count_swa", n_rot);
    if (file.get_int(a + ".attention.value_length", head_dim) != head_dim ||
        file.get_int(a + ".attention.value_length_swa", head_dim_swa) != head_dim_swa) {
        throw Error("model file '" + file.path() + "': key_length != value_length is not supported");
    }
    hp.layers.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) {
        const bool swa = hp.is_swa(il);
        LayerShape & s = hp.layers[il];
        s = {(int32_t) n_head_kv[il], (int32_t) (swa ? head_dim_swa : head_dim), (int32_t) (swa ? n_rot_swa : n_rot),
             (int32_t) n_ff[il]};
        const std::string at = " (layer " + std::to_string(il) + ")";
        require_positive(file, ("attention.head_count_kv" + at).c_str(), s.n_head_kv);
        require_positive(file, ("feed_forward_length" + at).c_str(), s.n_ff);
        require_positive(file, ("attention.key_length" + at).c_str(), s.head_dim);
        if (hp.n_head % s.n_head_kv != 0) {
            throw Error("model file '" + file.path() + "': head_count " + std::to_string(hp.n_head) +
                        " is not a multiple of head_count_kv " + std::to_string(s.n_head_kv) + at);
        }
        if (s.n_rot > s.head_dim || s.n_rot % 2 != 0) {
            throw Error("model file '" + file.path() + "': rope.dimension_count " + std::to_string(s.n_rot) +
                        " does not fit head size " + std::to_string(s.head_dim) + at);
        }
    }
}

// qwen3moe and gpt-oss always have experts, of their own width; gemma4 has
// them, of their own width, where the file counts them; llama has them where
// the file counts them (Mixtral), each as wide as feed_forward_length.
void read_moe(const GgufFile & file, const std::string & a, HParams & hp) {
    const bool required = hp.arch == Arch::Qwen3Moe || hp.arch == Arch::GptOss;
    hp.n_expert = (int32_t) (required ? file.get_int(a + ".expert_count") : file.get_int(a + ".expert_count", 0));
    if (hp.n_expert == 0 && !required) return;
    hp.n_expert_used = (int32_t) file.get_int(a + ".expert_used_count");
    hp.n_ff_exp =
        (int32_t) (hp.arch == Arch::Llama ? hp.layer(0).n_ff : file.get_int(a + ".expert_feed_forward_length"));
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

// Gemma 2 and 3's sliding-window layers, as upstream reads them: gemma3's 5
// of every 6 with a RoPE base of their own, gemma2's every other with a
// window of 4096 unless the file says.
void read_gemma_window(const GgufFile & file, const std::string & a, HParams & hp) {
    read_sliding_window(file, a, hp,
                        hp.arch == Arch::Gemma2 ? SlidingWindowDefaults{4096, 2, hp.rope_freq_base, true}
                                                : SlidingWindowDefaults{0, 6, 10000.0, false});
}

// Gemma 2 and 3's query scale (the 27B models, 46 and 62 layers, scale by
// n_embd / n_head) and soft-caps (gemma2's default to 50 on attention scores
// and 30 on logits).
void read_gemma_scales(const GgufFile & file, const std::string & a, HParams & hp) {
    const bool v2 = hp.arch == Arch::Gemma2;
    const bool is_27b = hp.n_layer == (v2 ? 46 : 62);
    hp.query_scale = 1.0f / std::sqrt((float) (is_27b ? hp.n_embd / hp.n_head : hp.layer(0).head_dim));
    hp.final_logit_softcap = (float) file.get_float(a + ".final_logit_softcapping", v2 ? 30.0 : 0.0);
    if (v2) hp.attn_logit_softcap = (float) file.get_float(a + ".attn_logit_softcapping", 50.0);
}

// Gemma 4's sliding-window layers, from a per-layer array, with a RoPE base
// of their own and no frequency scale.
void read_gemma4_window(const GgufFile & file, const std::string & a, HParams & hp) {
    const std::string key = a + ".attention.sliding_window_pattern";
    if (!file.is_array(key)) {
        throw Error("model file '" + file.path() + "': " + key + " must be an array of one flag per layer");
    }
    read_sliding_window(file, a, hp, {-1, 0, 10000.0, false});
}

// Gemma 4 as upstream reads it: attention unscaled (queries and keys are
// normed instead), logits soft-capped at 30 unless the file says, layers
// sharing an earlier layer's KV cache, per-layer token embeddings.
void read_gemma4(const GgufFile & file, const std::string & a, HParams & hp) {
    hp.query_scale = 1.0f;
    hp.final_logit_softcap = (float) file.get_float(a + ".final_logit_softcapping", 30.0);
    hp.n_embd_per_layer = (int32_t) file.get_int(a + ".embedding_length_per_layer_input", 0);
    hp.n_kv_shared = (int32_t) file.get_int(a + ".attention.shared_kv_layers", 0);
    if (hp.n_kv_shared < 0 || hp.n_embd_per_layer < 0) {
        throw Error("model file '" + file.path() + "': negative shared_kv_layers or embedding_length_per_layer_input");
    }
    if (hp.n_kv_shared == 0) return;
    if (hp.n_layer_kv() < 2) {
        throw Error("model file '" + file.path() + "': attention.shared_kv_layers " + std::to_string(hp.n_kv_shared) +
                    " leaves fewer than 2 of " + std::to_string(hp.n_layer) + " layers with a KV cache");
    }
    for (int il = hp.n_layer_kv(); il < hp.n_layer; ++il) {
        const int src = hp.kv_layer(il);
        if (hp.is_swa(src) != hp.is_swa(il) || hp.layer(src).n_head_kv != hp.layer(il).n_head_kv ||
            hp.layer(src).head_dim != hp.layer(il).head_dim) {
            throw Error("model file '" + file.path() + "': layer " + std::to_string(il) +
                        " shares the KV cache of layer " + std::to_string(src) +
                        ", which differs from it in sliding window, KV heads or head size");
        }
    }
}

}  // namespace

HParams read_hparams(const GgufFile & file) {
    HParams hp;
    hp.arch_name = file.get_string("general.architecture");
    hp.arch = parse_arch(file, hp.arch_name);
    const std::string & a = hp.arch_name;

    hp.n_embd = (int32_t) file.get_int(a + ".embedding_length");
    hp.n_layer = (int32_t) file.get_int(a + ".block_count");
    hp.n_head = (int32_t) file.get_int(a + ".attention.head_count");
    hp.n_ctx_train = (int32_t) file.get_int(a + ".context_length", 2048);
    hp.rms_eps = (float) file.get_float(a + ".attention.layer_norm_rms_epsilon", 1e-5);
    for (auto [what, v] : {std::pair<const char *, int64_t>{"embedding_length", hp.n_embd},
                           {"block_count", hp.n_layer},
                           {"attention.head_count", hp.n_head}}) {
        require_positive(file, what, v);
    }

    const ggml_tensor * embd = file.find_tensor("token_embd.weight");
    if (!embd) throw Error("model file '" + file.path() + "': missing tensor 'token_embd.weight'");
    hp.n_vocab = (int32_t) file.get_int(a + ".vocab_size", embd->ne[1]);
    read_rope(file, a, hp);
    if (hp.arch == Arch::Gemma2 || hp.arch == Arch::Gemma3) read_gemma_window(file, a, hp);
    if (hp.arch == Arch::Gemma4) read_gemma4_window(file, a, hp);
    // gpt-oss: every other layer slides (the first does), rotating as the others do.
    if (hp.is_gpt_oss()) read_sliding_window(file, a, hp, {-1, 2, hp.rope_freq_base, true});
    read_layer_shapes(file, a, hp);
    if (hp.arch != Arch::Qwen2 && hp.arch != Arch::Qwen3 && hp.arch != Arch::Phi3 && hp.arch != Arch::Gemma2 &&
        hp.arch != Arch::Gemma3) {
        read_moe(file, a, hp);
    }
    if (hp.arch == Arch::Phi3) hp.query_scale = 1.0f / std::sqrt((float) hp.layer(0).head_dim);
    if (hp.arch == Arch::Gemma2 || hp.arch == Arch::Gemma3) read_gemma_scales(file, a, hp);
    if (hp.arch == Arch::Gemma4) read_gemma4(file, a, hp);
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
