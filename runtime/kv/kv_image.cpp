#include "runtime/kv/kv_image.h"

#include "runtime/kv/layer_state.h"
#include "runtime/shard/axis.h"

#include <algorithm>
#include <cstring>

#include "ggml.h"

namespace llama_tp {

KvImageLayout KvImageLayout::of(const HParams & hp, const KvTypes & types, int32_t n_cells, int32_t window_keep) {
    KvImageLayout l;
    l.n_cells = n_cells;
    for (int il = 0; il < hp.n_layer_kv(); ++il) {
        Layer layer;
        layer.n_head_kv = hp.keeps_kv(il) ? hp.layer(il).n_head_kv : 0;  // linear attention: none
        layer.windowed = window_keep >= 0 && hp.is_swa(il);
        layer.n_cells = layer.windowed ? std::min(n_cells, window_keep) : n_cells;
        layer.k_head_bytes = ggml_row_size(types.k, hp.layer(il).head_dim);
        // Latent attention keeps keys only.
        layer.v_head_bytes = hp.block(il).attention.values_in_keys() ? 0 : ggml_row_size(types.v, hp.layer(il).v_dim());
        layer.at = l.total;
        l.total += (layer.k_row_bytes() + layer.v_row_bytes()) * (size_t) layer.n_cells;
        l.layers.push_back(layer);
    }
    const DeltaNetState state = delta_net_state(hp.delta, hp.delta.n_k_heads);
    l.delta = hp.delta;
    l.conv_channel_bytes = sizeof(float) * (size_t) state.per_channel;
    l.delta_head_bytes = sizeof(float) * (size_t) state.per_value_head;
    for (int il = 0; il < hp.n_layer; ++il) {
        if (hp.keeps_kv(il)) continue;
        State s{il, l.total, l.total + l.conv_channel_bytes * (size_t) state.channels};
        l.total = s.delta_at + l.delta_head_bytes * (size_t) state.value_heads;
        l.states.push_back(s);
    }
    return l;
}

std::vector<KvImageLayout::Span> KvImageLayout::conv_spans(size_t s, const ShardRange & k) const {
    std::vector<Span> spans;
    for (const ShardRange & c : delta_net_channels(delta, k)) {
        spans.push_back({states[s].conv_at + conv_channel_bytes * (size_t) c.begin, conv_channel_bytes * c.size()});
    }
    return spans;
}

std::vector<KvImageLayout::Span> KvImageLayout::delta_spans(size_t s, const ShardRange & k) const {
    std::vector<Span> spans;
    for (const ShardRange & v : delta_net_value_heads(delta, k)) {
        spans.push_back({states[s].delta_at + delta_head_bytes * (size_t) v.begin, delta_head_bytes * v.size()});
    }
    return spans;
}

std::vector<uint8_t> KvImageLayout::cut_to_window(const KvImageLayout & full, const KvImageLayout & window,
                                                  const std::vector<uint8_t> & image) {
    std::vector<uint8_t> out(window.bytes());
    // The states, after the layers, are the same in both.
    const size_t states_at = window.states.empty() ? window.bytes() : window.states.front().conv_at;
    std::memcpy(out.data() + states_at,
                image.data() + (full.states.empty() ? full.bytes() : full.states.front().conv_at),
                window.bytes() - states_at);
    for (int32_t il = 0; il < window.n_layer(); ++il) {
        const Layer & from = full.layers[il];
        const Layer & to = window.layers[il];
        const size_t skip = (size_t) (from.n_cells - to.n_cells);  // the oldest cells
        for (const bool values : {false, true}) {
            const size_t row = values ? to.v_row_bytes() : to.k_row_bytes();
            std::memcpy(out.data() + window.offset(il, values, 0, 0),
                        image.data() + full.offset(il, values, (int32_t) skip, 0), row * (size_t) to.n_cells);
        }
    }
    return out;
}

}  // namespace llama_tp
