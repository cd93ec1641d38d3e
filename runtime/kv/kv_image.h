#pragma once
// A sequence's cached keys and values as one image in the whole model's
// layout, whatever the split: for every layer with a cache of its own the K rows of its cells in
// position order, then the V rows, each row holding every KV head. Layers
// with a window pool (KvPoolSizes) hold only the window's last positions.
// Then every linear-attention layer's state: its convolution's last inputs
// (K - 1 floats per channel, the file's channel order), then its delta-rule
// state (head_v_dim^2 floats per value head). A rank writes or reads only
// its own heads' bytes, so an image taken at one --tp / -ts loads into any
// other.

#include "ggml-ext/shard_range.h"
#include "runtime/kv/kv_cache.h"

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace llama_tp {

struct KvImageLayout {
    // One layer's part: per cell its K row, and (after every cell's K) its V row.
    struct Layer {
        int32_t n_head_kv = 0;
        int32_t n_cells = 0;  // the image's cells, or the window's last ones
        bool windowed = false;
        size_t k_head_bytes = 0;  // one head of one cell's keys
        size_t v_head_bytes = 0;
        size_t at = 0;  // where the layer begins in the image
        size_t k_row_bytes() const { return k_head_bytes * (size_t) n_head_kv; }
        size_t v_row_bytes() const { return v_head_bytes * (size_t) n_head_kv; }
        size_t head_bytes(bool values) const { return values ? v_head_bytes : k_head_bytes; }
    };
    std::vector<Layer> layers;
    // A linear-attention layer's state in the image.
    struct State {
        int32_t il = 0;
        size_t conv_at = 0;
        size_t delta_at = 0;
    };
    std::vector<State> states;
    size_t conv_channel_bytes = 0;  // one channel's last inputs
    size_t delta_head_bytes = 0;    // one value head's state
    int32_t n_cells = 0;
    size_t total = 0;

    // Where key heads k's states of states[s] lie, piece by piece in the
    // order a rank's state rows hold them: (offset, bytes).
    using Span = std::pair<size_t, size_t>;
    std::vector<Span> conv_spans(size_t s, const ShardRange & k) const;
    std::vector<Span> delta_spans(size_t s, const ShardRange & k) const;
    DeltaNetShape delta;  // the model's linear-attention shape, which the spans follow

    // window_keep: KvPoolSizes::window_keep.
    static KvImageLayout of(const HParams & hp, const KvTypes & types, int32_t n_cells, int32_t window_keep);

    // An image of every cell (full, window_keep < 0) cut to what a window
    // pool keeps (window: the same cells, window_keep >= 0): each windowed
    // layer's last cells.
    static std::vector<uint8_t> cut_to_window(const KvImageLayout & full, const KvImageLayout & window,
                                              const std::vector<uint8_t> & image);

    int32_t n_layer() const { return (int32_t) layers.size(); }
    size_t bytes() const { return total; }
    // Where cell i (of the layer's cells) keys (or values) of head h in layer il begin.
    size_t offset(int32_t il, bool values, int32_t i, int32_t h) const {
        const Layer & l = layers[il];
        size_t at = l.at;
        if (values) at += l.k_row_bytes() * (size_t) l.n_cells;
        const size_t row = values ? l.v_row_bytes() : l.k_row_bytes();
        return at + row * (size_t) i + l.head_bytes(values) * (size_t) h;
    }
};

}  // namespace llama_tp
