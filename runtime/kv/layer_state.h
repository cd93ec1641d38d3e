#pragma once
// What a linear-attention layer keeps per sequence, for the key heads a
// cache holds. The cache, its footprint before loading and its images size
// themselves from this one description; the block defines it
// (runtime/blocks/delta_net.cpp), beside its weights and its graph.

#include "runtime/model/hparams.h"

#include <cstddef>
#include <cstdint>

namespace llama_tp {

// F32, as upstream keeps it: the convolution's last conv_kernel - 1 inputs of
// each channel, then a head_v_dim x head_v_dim delta-rule state per value head.
struct DeltaNetState {
    int64_t per_channel = 0;     // floats of one channel's last inputs
    int64_t per_value_head = 0;  // floats of one value head's state
    int64_t channels = 0;        // of the key heads asked for (their q, k and v channels)
    int64_t value_heads = 0;     // that read them
    int64_t conv_row() const { return per_channel * channels; }
    int64_t delta_row() const { return per_value_head * value_heads; }
    size_t bytes() const { return sizeof(float) * (size_t) (conv_row() + delta_row()); }
};

// The state of k_heads key heads (all of d.n_k_heads: the whole layer's).
DeltaNetState delta_net_state(const DeltaNetShape & d, int64_t k_heads);

}  // namespace llama_tp
