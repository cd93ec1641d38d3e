#include "runtime/kv/kv_image.h"

#include <algorithm>
#include <cstring>

#include "ggml.h"

namespace llama_tp {

KvImageLayout KvImageLayout::of(const HParams & hp, const KvTypes & types, int32_t n_cells, int32_t window_keep) {
    KvImageLayout l;
    l.n_cells = n_cells;
    for (int il = 0; il < hp.n_layer_kv(); ++il) {
        Layer layer;
        layer.n_head_kv = hp.layer(il).n_head_kv;
        layer.windowed = window_keep >= 0 && hp.is_swa(il);
        layer.n_cells = layer.windowed ? std::min(n_cells, window_keep) : n_cells;
        layer.k_head_bytes = ggml_row_size(types.k, hp.layer(il).head_dim);
        layer.v_head_bytes = ggml_row_size(types.v, hp.layer(il).head_dim);
        layer.at = l.total;
        l.total += (layer.k_row_bytes() + layer.v_row_bytes()) * (size_t) layer.n_cells;
        l.layers.push_back(layer);
    }
    return l;
}

std::vector<uint8_t> KvImageLayout::cut_to_window(const KvImageLayout & full, const KvImageLayout & window,
                                                  const std::vector<uint8_t> & image) {
    std::vector<uint8_t> out(window.bytes());
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
