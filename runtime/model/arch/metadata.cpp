#include "runtime/model/arch/metadata.h"

#include "runtime/error.h"
#include "runtime/model/gguf_file.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <vector>

namespace llama_tp {
namespace {

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

}  // namespace

void require_positive(const GgufFile & file, const std::string & what, int64_t v) {
    if (v <= 0)
        throw Error("model file '" + file.path() + "': " + what + " must be positive, got " + std::to_string(v));
}

void read_rope(const GgufFile & file, const std::string & a, HParams & hp, int32_t rope_type) {
    hp.rope_type = rope_type;
    hp.rope_freq_base_train = (float) file.get_float(a + ".rope.freq_base", 10000.0);
    hp.n_ctx_orig_train = file.get_int32(a + ".rope.scaling.original_context_length", hp.n_ctx_train);
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

void read_layer_shapes(const GgufFile & file, const std::string & a, HParams & hp, bool experts_only) {
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
        s = {file.as_int32(a + ".attention.head_count_kv", n_head_kv[il]),
             file.as_int32(a + ".attention.key_length", swa ? head_dim_swa : head_dim),
             file.as_int32(a + ".rope.dimension_count", swa ? n_rot_swa : n_rot),
             file.as_int32(a + ".feed_forward_length", n_ff[il])};
        const std::string at = " (layer " + std::to_string(il) + ")";
        require_positive(file, "attention.head_count_kv" + at, s.n_head_kv);
        require_positive(file, "feed_forward_length" + at, s.n_ff);
        require_positive(file, "attention.key_length" + at, s.head_dim);
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

void read_experts(const GgufFile & file, const std::string & a, HParams & hp, bool required, bool width_is_ffn) {
    hp.n_expert = required ? file.get_int32(a + ".expert_count") : file.get_int32(a + ".expert_count", 0);
    if (hp.n_expert == 0 && !required) return;
    hp.n_expert_used = file.get_int32(a + ".expert_used_count");
    hp.n_ff_exp = width_is_ffn ? hp.layer(0).n_ff : file.get_int32(a + ".expert_feed_forward_length");
    hp.expert_weights_scale = (float) file.get_float(a + ".expert_weights_scale", 0.0);
    require_positive(file, "expert_count", hp.n_expert);
    require_positive(file, "expert_used_count", hp.n_expert_used);
    require_positive(file, "expert_feed_forward_length", hp.n_ff_exp);
    if (hp.n_expert_used > hp.n_expert) {
        throw Error("model file '" + file.path() + "': expert_used_count " + std::to_string(hp.n_expert_used) +
                    " exceeds expert_count " + std::to_string(hp.n_expert));
    }
}

void read_sliding_window(const GgufFile & file, const std::string & a, HParams & hp, SlidingWindowDefaults d) {
    const std::string key = a + ".attention.sliding_window";
    hp.n_swa = d.window < 0 ? file.get_int32(key) : file.get_int32(key, d.window);
    if (hp.n_swa < 0 || (d.window < 0 && hp.n_swa == 0)) require_positive(file, "attention.sliding_window", hp.n_swa);
    if (hp.n_swa == 0) return;
    hp.swa_layers = read_swa_layers(file, a, hp, d.period);
    hp.rope_freq_base_swa = (float) file.get_float(a + ".rope.freq_base_swa", d.base_swa);
    hp.rope_freq_scale_swa = d.scaled ? hp.rope_freq_scale : 1.0f;
}

int32_t skip_nextn_layers(const GgufFile & file, const std::string & a, HParams & hp) {
    const int64_t n_nextn = file.get_int(a + ".nextn_predict_layers", 0);
    if (n_nextn < 0 || n_nextn >= hp.n_layer) {
        throw Error("model file '" + file.path() + "': nextn_predict_layers " + std::to_string(n_nextn) +
                    " leaves no layers of " + std::to_string(hp.n_layer));
    }
    hp.n_layer -= (int32_t) n_nextn;
    return (int32_t) n_nextn;
}

void set_uniform_blocks(HParams & hp, const LayerBlocks & blocks) {
    hp.blocks.assign(hp.n_layer, blocks);
}

DenseThenExperts read_dense_then_experts(const GgufFile & file, const std::string & a, const HParams & hp) {
    const int64_t n_dense = file.get_int(a + ".leading_dense_block_count", 0);
    const int64_t n_shared = file.get_int(a + ".expert_shared_count");
    if (n_dense < 0 || n_dense > hp.n_layer) {
        throw Error("model file '" + file.path() + "': leading_dense_block_count " + std::to_string(n_dense) +
                    " is not within the " + std::to_string(hp.n_layer) + " layers");
    }
    // The shared expert's width, n_shared experts', must be a width.
    if (n_shared < 0 || n_shared * std::max<int64_t>(hp.n_ff_exp, 1) > INT32_MAX) {
        throw Error("model file '" + file.path() + "': expert_shared_count " + std::to_string(n_shared) +
                    " is not a number of experts");
    }
    return {(int32_t) n_dense, (int32_t) n_shared};
}

LayerBlocks routed_experts_blocks(const GgufFile & file, const std::string & a, const LayerBlocks & dense,
                                  DenseThenExperts counts, FfnBlock::Routing default_routing) {
    const std::string gating = a + ".expert_gating_func";
    const int64_t g = file.get_int(gating, 0);
    if (g < 0 || g > 2) {
        throw Error("model file '" + file.path() + "': " + gating + " " + std::to_string(g) +
                    " is not supported (1: softmax, 2: sigmoid)");
    }
    LayerBlocks experts = dense;
    experts.ffn.kind = counts.n_shared > 0 ? FfnBlock::Kind::ExpertsAndShared : FfnBlock::Kind::Experts;
    experts.ffn.routing = g == 0 ? default_routing : g == 1 ? FfnBlock::Routing::Softmax : FfnBlock::Routing::Sigmoid;
    experts.ffn.normalize_weights = file.get_bool(a + ".expert_weights_norm", false);
    experts.ffn.selection_bias =
        file.find_tensor("blk." + std::to_string(counts.n_dense) + ".exp_probs_b.bias") != nullptr;
    experts.ffn.shared_gate = false;
    return experts;
}

void place_dense_then_experts(HParams & hp, const LayerBlocks & dense, const LayerBlocks & experts,
                              DenseThenExperts counts) {
    for (int il = 0; il < hp.n_layer; ++il) {
        const bool is_dense = il < counts.n_dense;
        hp.blocks.push_back(is_dense ? dense : experts);
        // The shared expert is as wide as n_shared routed ones.
        if (!is_dense) hp.layers[il].n_ff = counts.n_shared > 0 ? counts.n_shared * hp.n_ff_exp : 1;
    }
}

}  // namespace llama_tp
