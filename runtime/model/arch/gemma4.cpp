// gemma4, as upstream reads it: gemma3's blocks with per-layer head sizes,
// values normed too, attention unscaled (queries and keys are normed
// instead), logits soft-capped at 30 unless the file says; sliding-window
// layers from a per-layer array, with a RoPE base of their own and neither
// frequency scale nor factors; the last layers sharing an earlier layer's KV
// cache; per-layer token embeddings (E2B, E4B); experts beside the dense
// FFN where the file counts them; output rows picked after the final norm.
#include "runtime/error.h"
#include "runtime/model/arch/architectures.h"
#include "runtime/model/arch/metadata.h"
#include "runtime/model/gguf_file.h"

#include <cmath>

#include "ggml.h"

namespace llama_tp {
namespace {

void read_window(const GgufFile & file, const std::string & a, HParams & hp) {
    const std::string key = a + ".attention.sliding_window_pattern";
    if (!file.is_array(key)) {
        throw Error("model file '" + file.path() + "': " + key + " must be an array of one flag per layer");
    }
    read_sliding_window(file, a, hp, {-1, 0, 10000.0, false});
}

// Layers that share an earlier layer's cache must match it.
void read_shared_kv(const GgufFile & file, const std::string & a, HParams & hp) {
    hp.n_kv_shared = file.get_int32(a + ".attention.shared_kv_layers", 0);
    if (hp.n_kv_shared < 0 || hp.n_embd_per_layer < 0) {
        throw Error("model file '" + file.path() + "': negative shared_kv_layers or embedding_length_per_layer_input");
    }
    if (hp.n_kv_shared == 0) return;
    if (hp.n_layer_kv() < 2) {
        throw Error("model file '" + file.path() + "': attention.shared_kv_layers " + std::to_string(hp.n_kv_shared) +
                    " leaves fewer than 2 of " + std::to_string(hp.n_layer) + " layers with a KV cache");
    }
    for (int il = hp.n_layer_kv(); il < hp.n_layer; ++il) {
        const int src = hp.kv_layer(il);
        if (hp.is_swa(src) != hp.is_swa(il) || hp.layer(src).n_head_kv != hp.layer(il).n_head_kv ||
            hp.layer(src).head_dim != hp.layer(il).head_dim) {
            throw Error("model file '" + file.path() + "': layer " + std::to_string(il) +
                        " shares the KV cache of layer " + std::to_string(src) +
                        ", which differs from it in sliding window, KV heads or head size");
        }
    }
}

}  // namespace

void read_gemma4(const GgufFile & file, const std::string & a, HParams & hp) {
    read_rope(file, a, hp, GGML_ROPE_TYPE_NEOX);
    read_window(file, a, hp);
    read_layer_shapes(file, a, hp, /*experts_only =*/false);
    read_experts(file, a, hp, /*required =*/false, /*width_is_ffn =*/false);
    hp.query_scale = 1.0f;
    hp.final_logit_softcap = (float) file.get_float(a + ".final_logit_softcapping", 30.0);
    hp.n_embd_per_layer = file.get_int32(a + ".embedding_length_per_layer_input", 0);
    read_shared_kv(file, a, hp);
    hp.embedding_scale = std::sqrt((float) hp.n_embd);
    hp.rows_after_norm = true;
    hp.blocks.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) {
        LayerBlocks & b = hp.blocks[il];
        b.attention.qk_norm = true;
        b.attention.value_norm = true;
        b.attention.values_optional = true;
        b.attention.post_norm = true;
        b.attention.rope_factors = !hp.is_swa(il);
        b.ffn.kind = hp.is_moe() ? FfnBlock::Kind::DenseAndExperts : FfnBlock::Kind::Dense;
        b.ffn.gate = FfnBlock::Gate::GeGlu;
        b.ffn.post_norm = true;
        b.ffn.expert_scales = hp.is_moe();
        b.output_scale = true;
    }
}

}  // namespace llama_tp
