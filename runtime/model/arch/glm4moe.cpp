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
    const DenseThenExperts counts = read_dense_then_experts(file, a, hp);
    LayerBlocks dense;
    dense.attention.qkv_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;
    dense.attention.qk_norm = file.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
    dense.ffn.input_norm = "post_attention_norm";
    // Sigmoid scores where the file names none, as upstream defaults.
    LayerBlocks experts = routed_experts_blocks(file, a, dense, counts, FfnBlock::Routing::Sigmoid);
    experts.ffn.selection_bias = true;  // required, as upstream loads it
    place_dense_then_experts(hp, dense, experts, counts);
}

}  // namespace llama_tp
