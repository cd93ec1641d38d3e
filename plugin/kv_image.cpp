#include "plugin/kv_image.h"

#include "ggml.h"

namespace llama_tp {

KvImageLayout KvImageLayout::of(const HParams & hp, const KvTypes & types, int32_t n_cells) {
    KvImageLayout l;
    l.n_layer = hp.n_layer;
    l.n_head_kv = hp.n_head_kv;
    l.k_head_bytes = ggml_row_size(types.k, hp.head_dim);
    l.v_head_bytes = ggml_row_size(types.v, hp.head_dim);
    l.n_cells = n_cells;
    return l;
}

}  // namespace llama_tp
