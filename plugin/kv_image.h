#pragma once
// A sequence's cached keys and values as one image in the whole model's
// layout, whatever the split: for every layer the K rows of its cells in
// position order, then the V rows, each row holding every KV head. A rank
// writes or reads only its own heads' bytes, so an image taken at one --tp /
// -ts loads into any other.

#include "plugin/kv_cache.h"

#include <cstddef>
#include <cstdint>

namespace llama_tp {

struct KvImageLayout {
    int32_t n_layer = 0;
    int32_t n_head_kv = 0;
    size_t k_head_bytes = 0;  // one head of one cell's keys
    size_t v_head_bytes = 0;
    int32_t n_cells = 0;

    static KvImageLayout of(const HParams & hp, const KvTypes & types, int32_t n_cells);

    size_t k_row_bytes() const { return k_head_bytes * (size_t) n_head_kv; }
    size_t v_row_bytes() const { return v_head_bytes * (size_t) n_head_kv; }
    size_t layer_bytes() const { return (k_row_bytes() + v_row_bytes()) * (size_t) n_cells; }
    size_t bytes() const { return layer_bytes() * (size_t) n_layer; }
    // Where cell i's keys (or values) of head h in layer il begin.
    size_t offset(int32_t il, bool values, int32_t i, int32_t h) const {
        size_t at = layer_bytes() * (size_t) il;
        if (values) at += k_row_bytes() * (size_t) n_cells;
        const size_t row = values ? v_row_bytes() : k_row_bytes();
        return at + row * (size_t) i + (values ? v_head_bytes : k_head_bytes) * (size_t) h;
    }
};

}  // namespace llama_tp
