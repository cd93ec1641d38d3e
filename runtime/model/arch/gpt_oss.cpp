// gpt-oss: biases on Q, K, V and the attention output, attention sinks,
// every other layer sliding (the first does, rotating as the others do);
// experts only, with biases on the router and every expert matrix, the
// router's top-k logits softmaxed, and a clamped SwiGLU (alpha 1.702, limit
// 7). Its FFN's input norm is called post_attention_norm.
#include "runtime/model/arch/architectures.h"
#include "runtime/model/arch/metadata.h"

#include "ggml.h"

namespace llama_tp {

void read_gpt_oss(const GgufFile & file, const std::string & a, HParams & hp) {
    read_rope(file, a, hp, GGML_ROPE_TYPE_NEOX);
    read_sliding_window(file, a, hp, {-1, 2, hp.rope_freq_base, true});
    read_layer_shapes(file, a, hp, /*experts_only =*/true);
    read_experts(file, a, hp, /*required =*/true, /*width_is_ffn =*/false);
    LayerBlocks blocks;
    blocks.attention.qkv_bias = true;
    blocks.attention.sinks = true;
    blocks.ffn.kind = FfnBlock::Kind::Experts;
    blocks.ffn.gate = FfnBlock::Gate::SwiGluClamped;
    blocks.ffn.input_norm = "post_attention_norm";
    blocks.ffn.routing = FfnBlock::Routing::SoftmaxOfPicked;
    blocks.ffn.normalize_weights = false;
    blocks.ffn.expert_biases = true;
    set_uniform_blocks(hp, blocks);
}

}  // namespace llama_tp
