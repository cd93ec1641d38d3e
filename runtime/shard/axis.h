#pragma once
// One axis a split divides (the query heads, an FFN width): its extent, the
// unit its boundaries fall on and how to name it in an error. The shard plan
// (shard_plan.cpp) splits every axis alike; each block kind says which axes
// it has and what their units are, in its own file (runtime/blocks/).

#include "ggml-ext/shard_range.h"
#include "runtime/model/hparams.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace llama_tp {

class GgufFile;

struct Axis {
    int64_t extent;
    int64_t unit;  // boundaries fall on multiples of it
    std::string what;
    // Throws llama_tp::Error saying what cannot be split and why.
    std::vector<ShardRange> split(const std::vector<float> & weights) const;
};

// Quantization block of a tensor (1 for float types); 1 when absent.
int64_t block_of(const GgufFile & file, const std::string & name);
// The largest block of the copies of a tensor (blk.N.suffix) in the layers `pick` picks.
int64_t block_of_layers(const GgufFile & file, const HParams & hp, const std::string & suffix,
                        const std::function<bool(int)> & pick);

// The blocks' axes, each defined in its block's file.
// Attention (runtime/blocks/attention.cpp): the query heads, in units that
// keep whole KV groups where KV heads go round and whole quantization
// blocks of attn_output's columns.
Axis attention_head_axis(const GgufFile & file, const HParams & hp, int64_t n_ranks);
// The KV heads layer il's query heads q read; throws llama_tp::Error where
// they do not map evenly onto KV heads.
ShardRange attention_kv_heads(const HParams & hp, int il, const ShardRange & q, int rank, int n_ranks);
// Linear attention (runtime/blocks/delta_net.cpp): the key heads, in units
// that keep whole quantization blocks of ssm_out's columns.
Axis delta_net_head_axis(const GgufFile & file, const HParams & hp);
// The value heads that read key heads k, as ranges of value heads in the
// order a rank stacks them (d.value_blocks() of them).
std::vector<ShardRange> delta_net_value_heads(const DeltaNetShape & d, const ShardRange & k);
// The convolution's channels of key heads k (their q and k channels, then
// their value heads'), as ranges of the file's channels in the rank's order.
std::vector<ShardRange> delta_net_channels(const DeltaNetShape & d, const ShardRange & k);
// FFN (runtime/blocks/ffn.cpp): a width of `width` whose down projections
// (blk.*.down) are in the layers `layers` picks.
Axis ffn_width_axis(const GgufFile & file, const HParams & hp, int64_t width, const std::string & down, int64_t n_ranks,
                    const std::function<bool(int)> & layers);

}  // namespace llama_tp
