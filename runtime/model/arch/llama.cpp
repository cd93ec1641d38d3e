// llama, and Mixtral (llama with experts, each as wide as feed_forward_length).
#include "runtime/model/arch/architectures.h"
#include "runtime/model/arch/metadata.h"

#include "ggml.h"

namespace llama_tp {

void read_llama(const GgufFile & file, const std::string & a, HParams & hp) {
    read_rope(file, a, hp, GGML_ROPE_TYPE_NORMAL);
    read_layer_shapes(file, a, hp, /*experts_only =*/false);
    read_experts(file, a, hp, /*required =*/false, /*width_is_ffn =*/true);
    LayerBlocks blocks;
    if (hp.is_moe()) blocks.ffn.kind = FfnBlock::Kind::Experts;
    set_uniform_blocks(hp, blocks);
}

}  // namespace llama_tp
