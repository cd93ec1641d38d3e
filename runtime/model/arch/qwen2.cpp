// qwen2: llama's blocks with biases on Q, K and V, rotating NeoX style.
#include "runtime/model/arch/architectures.h"
#include "runtime/model/arch/metadata.h"

#include "ggml.h"

namespace llama_tp {

void read_qwen2(const GgufFile & file, const std::string & a, HParams & hp) {
    read_rope(file, a, hp, GGML_ROPE_TYPE_NEOX);
    read_layer_shapes(file, a, hp, /*experts_only =*/false);
    LayerBlocks blocks;
    blocks.attention.qkv_bias = true;
    set_uniform_blocks(hp, blocks);
}

}  // namespace llama_tp
