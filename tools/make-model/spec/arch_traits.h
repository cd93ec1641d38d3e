#pragma once
// What the spec's parts (shapes, tensors, metadata) ask of an architecture
// beyond its name: which families of layers it has and each layer's sizes.

#include "tools/make-model/spec/model_spec.h"

namespace llama_tp::make_model {

inline bool is_gemma(Arch arch) {
    return arch == Arch::gemma2 || arch == Arch::gemma3 || arch == Arch::gemma4;
}

// Linear attention beside gated full attention: Qwen 3.5's layers, dense or
// with experts, and Qwen3-Next's.
inline bool has_linear_attention(Arch arch) {
    return arch == Arch::qwen35 || arch == Arch::qwen35moe || arch == Arch::qwen3next;
}

// Routed experts beside a shared expert gated per token.
inline bool has_gated_shared_expert(Arch arch) {
    return arch == Arch::qwen35moe || arch == Arch::qwen3next;
}

// Routed experts beside a shared expert, gated or not.
inline bool has_shared_expert(Arch arch) {
    return has_gated_shared_expert(arch) || arch == Arch::glm4moe || arch == Arch::deepseek2;
}

// The first layers dense, the others experts (leading_dense_block_count).
inline bool has_leading_dense_layers(Arch arch) {
    return arch == Arch::glm4moe || arch == Arch::deepseek2;
}

// Multi-token-prediction layers may follow the trunk's.
inline bool has_nextn_layers(Arch arch) {
    return has_linear_attention(arch) || arch == Arch::glm4moe || arch == Arch::deepseek2;
}

// gemma4's layers: sliding ones as the shape says, global ones with their own
// head size and KV heads; those sharing an earlier layer's cache store none.
struct LayerDims {
    int64_t head_dim, n_head_kv, n_ff;
    bool swa, own_kv;
};

inline LayerDims layer_dims(Arch arch, const Shape & s, int64_t il) {
    if (arch != Arch::gemma4) return {s.head_dim, s.n_head_kv, s.n_ff, false, true};
    const bool swa = is_swa_layer(s, il), own_kv = il < s.n_layer - s.n_kv_shared;
    return {swa ? s.head_dim : s.head_dim_global, swa ? s.n_head_kv : s.n_head_kv_global, own_kv ? s.n_ff : 2 * s.n_ff,
            swa, own_kv};
}

}  // namespace llama_tp::make_model
