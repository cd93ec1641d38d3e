// gemma2 and gemma3: token embeddings scaled by sqrt(n_embd), RMS norms after
// attention and after the FFN too, a GELU-gated FFN, sliding-window layers,
// queries scaled after RoPE, soft-capped logits (gemma2: and attention
// scores; its head is its embedding table); gemma3 norms queries and keys.
#include "runtime/model/arch/architectures.h"
#include "runtime/model/arch/metadata.h"
#include "runtime/model/gguf_file.h"

#include <cmath>

#include "ggml.h"

namespace llama_tp {
namespace {

// What gemma2 and gemma3 read alike: their sliding-window layers as upstream
// reads them (gemma3's 5 of every 6 with a RoPE base of their own, gemma2's
// every other with a window of 4096 unless the file says), their query
// scale (the 27B models, 46 and 62 layers, scale by n_embd / n_head) and
// soft-caps (gemma2's default to 50 on attention scores and 30 on logits).
void read_gemma(const GgufFile & file, const std::string & a, HParams & hp, bool v2) {
    read_rope(file, a, hp, GGML_ROPE_TYPE_NEOX);
    read_sliding_window(
        file, a, hp,
        v2 ? SlidingWindowDefaults{4096, 2, hp.rope_freq_base, true} : SlidingWindowDefaults{0, 6, 10000.0, false});
    read_layer_shapes(file, a, hp, /*experts_only =*/false);
    const bool is_27b = hp.n_layer == (v2 ? 46 : 62);
    hp.query_scale = 1.0f / std::sqrt((float) (is_27b ? hp.n_embd / hp.n_head : hp.layer(0).head_dim));
    hp.final_logit_softcap = (float) file.get_float(a + ".final_logit_softcapping", v2 ? 30.0 : 0.0);
    if (v2) hp.attn_logit_softcap = (float) file.get_float(a + ".attn_logit_softcapping", 50.0);
    hp.embedding_scale = std::sqrt((float) hp.n_embd);
    LayerBlocks blocks;
    blocks.attention.qk_norm = !v2;
    blocks.attention.post_norm = true;
    blocks.ffn.gate = FfnBlock::Gate::GeGlu;
    blocks.ffn.post_norm = true;
    set_uniform_blocks(hp, blocks);
}

}  // namespace

void read_gemma2(const GgufFile & file, const std::string & a, HParams & hp) {
    read_gemma(file, a, hp, /*v2 =*/true);
    hp.head_is_embedding = true;
}

void read_gemma3(const GgufFile & file, const std::string & a, HParams & hp) {
    read_gemma(file, a, hp, /*v2 =*/false);
}

}  // namespace llama_tp
