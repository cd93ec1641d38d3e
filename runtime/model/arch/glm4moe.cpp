// glm4moe (GLM-4.5, 4.6, 4.7 and their Air variants): grouped-query
// attention with biases on Q, K and V, Q/K norms where the file has them
// and part of each head rotated (NeoX style); the first
// leading_dense_block_count layers a dense FFN, the others routed experts
// picked by sigmoid scores plus a selection bias, beside an ungated shared
// expert expert_shared_count experts wide. The FFN's input norm is called
// post_attention_norm. Multi-token-prediction layers are not read.
#include "runtime/error.h"
#include "runtime/model/arch/architectures.h"
#include "runtime/model/arch/metadata.h"
#include "runtime/model/gguf_file.h"

#include "ggml.h"

namespace llama_tp {

namespace {

// upstream's expert_gating_func values.
FfnBlock::Routing read_routing(const GgufFile & file, const std::string & a) {
    const std::string key = a + ".expert_gating_func";
    const int64_t v = file.get_int(key, 0);
    if (v == 0 || v == 2) return FfnBlock::Routing::Sigmoid;  // 0: none given, sigmoid as upstream defaults
    if (v == 1) return FfnBlock::Routing::Softmax;
    throw Error("model file '" + file.path() + "': " + key + " " + std::to_string(v) +
                " is not supported (1: softmax, 2: sigmoid)");
}

// M-RoPE sections (the vision variants' files) rotate text as upstream's
// multi-section RoPE, which llama-tp does not build.
void refuse_rope_sections(const GgufFile & file, const std::string & a) {
    const std::string key = a + ".rope.dimension_sections";
    if (!file.is_array(key)) return;
    const std::vector<int64_t> s = file.get_int_array(key);
    if (s.size() >= 2 && s[0] > 0 && s[1] > 0) {
        throw Error("model file '" + file.path() + "': " + key +
                    " asks for multi-section RoPE (a vision model's), which llama-tp does not build");
    }
}

}  // namespace

void read_glm4moe(const GgufFile & file, const std::string & a, HParams & hp) {
    skip_nextn_layers(file, a, hp);
    refuse_rope_sections(file, a);
    read_rope(file, a, hp, GGML_ROPE_TYPE_NEOX);
    read_layer_shapes(file, a, hp, /*experts_only =*/false);
    read_experts(file, a, hp, /*required =*/true, /*width_is_ffn =*/false);
    const int64_t n_dense = file.get_int(a + ".leading_dense_block_count", 0);
    const int64_t n_shared = file.get_int(a + ".expert_shared_count");
    if (n_dense < 0 || n_dense > hp.n_layer) {
        throw Error("model file '" + file.path() + "': leading_dense_block_count " + std::to_string(n_dense) +
                    " is not within the " + std::to_string(hp.n_layer) + " layers");
    }
    if (n_shared < 0) require_positive(file, "expert_shared_count", n_shared);
    LayerBlocks dense;
    dense.attention.qkv_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;
    dense.attention.qk_norm = file.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
    dense.ffn.input_norm = "post_attention_norm";
    LayerBlocks experts = dense;
    experts.ffn.kind = n_shared > 0 ? FfnBlock::Kind::ExpertsAndShared : FfnBlock::Kind::Experts;
    experts.ffn.routing = read_routing(file, a);
    experts.ffn.normalize_weights = file.get_bool(a + ".expert_weights_norm", false);
    experts.ffn.selection_bias = true;
    experts.ffn.shared_gate = false;
    for (int il = 0; il < hp.n_layer; ++il) {
        const bool is_dense = il < n_dense;
        hp.blocks.push_back(is_dense ? dense : experts);
        // The shared expert is as wide as expert_shared_count routed ones.
        if (!is_dense) hp.layers[il].n_ff = (int32_t) (n_shared > 0 ? n_shared * hp.n_ff_exp : 1);
    }
}

}  // namespace llama_tp
