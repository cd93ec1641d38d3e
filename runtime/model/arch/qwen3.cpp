// qwen3 and qwen3moe: per-head RMS norms of queries and keys, rotating NeoX
// style; qwen3moe's FFNs are experts of their own width only. A qwen3
// reranker scores its last token.
#include "runtime/model/arch/architectures.h"
#include "runtime/model/arch/metadata.h"

#include "ggml.h"

namespace llama_tp {

void read_qwen3(const GgufFile & file, const std::string & a, HParams & hp) {
    read_rope(file, a, hp, GGML_ROPE_TYPE_NEOX);
    read_layer_shapes(file, a, hp, /*experts_only =*/false);
    LayerBlocks blocks;
    blocks.attention.qk_norm = true;
    set_uniform_blocks(hp, blocks);
    hp.classify_last_token = true;
}

void read_qwen3moe(const GgufFile & file, const std::string & a, HParams & hp) {
    read_rope(file, a, hp, GGML_ROPE_TYPE_NEOX);
    read_layer_shapes(file, a, hp, /*experts_only =*/true);
    read_experts(file, a, hp, /*required =*/true, /*width_is_ffn =*/false);
    LayerBlocks blocks;
    blocks.attention.qk_norm = true;
    blocks.ffn.kind = FfnBlock::Kind::Experts;
    set_uniform_blocks(hp, blocks);
}

}  // namespace llama_tp
