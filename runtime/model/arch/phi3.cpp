// phi3: Q, K and V in one matrix and gate and up in another (both loaded as
// the rank's slices of each part), queries scaled by 1/sqrt(head size)
// after RoPE, rotating NeoX style, LongRoPE factors where the file has them.
#include "runtime/model/arch/architectures.h"
#include "runtime/model/arch/metadata.h"

#include <cmath>

#include "ggml.h"

namespace llama_tp {

void read_phi3(const GgufFile & file, const std::string & a, HParams & hp) {
    read_rope(file, a, hp, GGML_ROPE_TYPE_NEOX);
    read_layer_shapes(file, a, hp, /*experts_only =*/false);
    hp.query_scale = 1.0f / std::sqrt((float) hp.layer(0).head_dim);
    LayerBlocks blocks;
    blocks.ffn.fused_gate_up = true;
    set_uniform_blocks(hp, blocks);
}

}  // namespace llama_tp
