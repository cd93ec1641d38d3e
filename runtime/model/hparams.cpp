#include "runtime/model/hparams.h"

#include "runtime/error.h"
#include "runtime/model/arch/architectures.h"
#include "runtime/model/arch/metadata.h"
#include "runtime/model/gguf_file.h"

#include "ggml.h"

#include <cmath>

namespace llama_tp {

HParams read_hparams(const GgufFile & file, bool mtp_head) {
    HParams hp;
    hp.mtp_head = mtp_head;
    hp.arch_name = file.get_string("general.architecture");
    const ArchitectureReader read_architecture = find_architecture(hp.arch_name);
    if (!read_architecture) {
        throw Error("model file '" + file.path() + "': architecture '" + hp.arch_name +
                    "' is not supported (supported: " + architecture_names() + ")");
    }
    const std::string & a = hp.arch_name;

    hp.n_embd = file.get_int32(a + ".embedding_length");
    hp.n_layer = file.get_int32(a + ".block_count");
    hp.n_head = file.get_int32(a + ".attention.head_count");
    hp.n_ctx_train = file.get_int32(a + ".context_length", 2048);
    hp.rms_eps = (float) file.get_float(a + ".attention.layer_norm_rms_epsilon", 1e-5);
    for (auto [what, v] : {std::pair<const char *, int64_t>{"embedding_length", hp.n_embd},
                           {"block_count", hp.n_layer},
                           {"attention.head_count", hp.n_head}}) {
        require_positive(file, what, v);
    }

    const ggml_tensor * embd = file.find_tensor("token_embd.weight");
    if (!embd) throw Error("model file '" + file.path() + "': missing tensor 'token_embd.weight'");
    // What the loader sizes its tables by, against what the file holds: every
    // layer has tensors of its own, the embedding is n_embd wide.
    if (hp.n_layer > file.n_tensors()) {
        throw Error("model file '" + file.path() + "': block_count is " + std::to_string(hp.n_layer) +
                    ", but the file holds only " + std::to_string(file.n_tensors()) + " tensors");
    }
    if (embd->ne[0] != hp.n_embd) {
        throw Error("model file '" + file.path() + "': embedding_length is " + std::to_string(hp.n_embd) +
                    ", but token_embd.weight is " + std::to_string(embd->ne[0]) + " wide");
    }
    hp.n_vocab = file.get_int32(a + ".vocab_size", embd->ne[1]);
    read_architecture(file, a, hp);
    if (mtp_head && hp.first_file_block == 0) {
        throw Error("model file '" + file.path() + "': architecture '" + a +
                    "' has no multi-token-prediction layer llama-tp drafts with (qwen35, qwen35moe and qwen3next "
                    "files with nextn_predict_layers 1 have)");
    }
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
        // With a magnitude over all dimensions (deepseek2) it is the ratio of
        // the two magnitudes, upstream's reading of DeepSeek's config.
        const float factor = 1.0f / hp.rope_freq_scale;
        auto magnitude = [factor](float m) { return factor <= 1.0f ? 1.0f : 0.1f * m * std::log(factor) + 1.0f; };
        const float all_dims = hp.rope_yarn_log_mul;
        hp.yarn_attn_factor =
            all_dims != 0.0f ? magnitude(all_dims != 1.0f ? all_dims : 1.0f) / magnitude(all_dims) : magnitude(1.0f);
        hp.yarn_attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
    }
    hp.yarn_attn_factor *= hp.rope_attn_factor;
}

}  // namespace llama_tp
