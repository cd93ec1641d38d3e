#pragma once
// The GGUF metadata architectures read alike: each architecture's file
// (architectures.h) calls these, in its order, for the keys it has.

#include "runtime/model/hparams.h"

#include <cstdint>
#include <string>

namespace llama_tp {

class GgufFile;

// Throws llama_tp::Error naming the file and the key where v <= 0.
void require_positive(const GgufFile & file, const std::string & what, int64_t v);

// RoPE as the file gives it, rotating as rope_type says (ggml's mode), and
// the values the graph applies without overrides.
void read_rope(const GgufFile & file, const std::string & a, HParams & hp, int32_t rope_type);

// Every layer's shape, as upstream reads it: KV heads and FFN widths per
// layer where the file gives arrays; sliding-window layers with a head size
// and rotated dimensions of their own where it gives the _swa keys.
// experts_only: no dense FFN, so feed_forward_length may be absent.
void read_layer_shapes(const GgufFile & file, const std::string & a, HParams & hp, bool experts_only);

// The experts: expert_count (required, or 0 where absent: none), the used
// count, their width (expert_feed_forward_length, or the dense FFN's width
// where width_is_ffn: Mixtral) and weight scale.
void read_experts(const GgufFile & file, const std::string & a, HParams & hp, bool required, bool width_is_ffn);

// The sliding window (window 0: none), which layers slide, and their RoPE:
// base_swa where the file gives none, the other layers' frequency scale or none.
struct SlidingWindowDefaults {
    int64_t window;  // -1: the file must give it
    int64_t period;  // layers il with il % period < period - 1 slide, where the file gives no array
    double base_swa;
    bool scaled;
};
void read_sliding_window(const GgufFile & file, const std::string & a, HParams & hp, SlidingWindowDefaults d);

// Multi-token-prediction layers (nextn_predict_layers) come after the
// trunk's in block_count; decoding reads only the trunk, so n_layer drops
// them. Refused where they would leave no trunk. Returns how many there are.
int32_t skip_nextn_layers(const GgufFile & file, const std::string & a, HParams & hp);

// Every layer with the same blocks.
void set_uniform_blocks(HParams & hp, const LayerBlocks & blocks);

// Leading dense layers, then routed experts beside a shared expert
// (glm4moe, deepseek2): how many layers are dense
// (leading_dense_block_count, within n_layer) and how many experts wide the
// shared expert is (expert_shared_count, 0: none). After read_experts.
struct DenseThenExperts {
    int32_t n_dense = 0;
    int32_t n_shared = 0;
};
DenseThenExperts read_dense_then_experts(const GgufFile & file, const std::string & a, const HParams & hp);

// The expert layers' blocks: dense's attention, routed experts scored as
// expert_gating_func says (1 softmax, 2 sigmoid; absent: default_routing),
// their weights normalised where expert_weights_norm, a selection bias
// where the first expert layer has exp_probs_b, the shared expert ungated.
LayerBlocks routed_experts_blocks(const GgufFile & file, const std::string & a, const LayerBlocks & dense,
                                  DenseThenExperts counts, FfnBlock::Routing default_routing);

// The first n_dense layers dense, the others experts with the shared
// expert's width (after read_experts and the layer shapes).
void place_dense_then_experts(HParams & hp, const LayerBlocks & dense, const LayerBlocks & experts,
                              DenseThenExperts counts);

}  // namespace llama_tp
