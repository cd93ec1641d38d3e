#include "plugin/kv_cache.h"

#include "plugin/error.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "ggml.h"

namespace llama_tp {

KvCache::KvCache(const HParams & hp, int32_t n_head_kv, int32_t n_cells, int32_t n_seq_max,
                 ggml_backend_buffer_type_t buft)
    : cells_(n_cells), n_seq_max_(n_seq_max) {
    ggml_init_params params = {2 * (size_t) hp.n_layer * ggml_tensor_overhead(), nullptr, true};
    ctx_.reset(ggml_init(params));
    if (!ctx_) throw Error("out of memory creating the KV cache context");
    const int64_t row = (int64_t) n_head_kv * hp.head_dim;
    for (int il = 0; il < hp.n_layer; ++il) {
        ggml_tensor * k = ggml_new_tensor_2d(ctx_.get(), GGML_TYPE_F16, row, n_cells);
        ggml_tensor * v = ggml_new_tensor_2d(ctx_.get(), GGML_TYPE_F16, row, n_cells);
        ggml_format_name(k, "cache_k_l%d", il);
        ggml_format_name(v, "cache_v_l%d", il);
        k_.push_back(k);
        v_.push_back(v);
    }
    buffer_.reset(ggml_backend_alloc_ctx_tensors_from_buft(ctx_.get(), buft));
    if (!buffer_) {
        throw Error("out of memory allocating a KV cache of " + std::to_string(n_cells) + " cells");
    }
    // Free cells are masked out, but 0 * NaN garbage must never reach a sum.
    ggml_backend_buffer_clear(buffer_.get(), 0);
}

int32_t KvCache::n_free() const {
    return (int32_t) std::count_if(cells_.begin(), cells_.end(), [](const Cell & c) { return c.pos < 0; });
}

bool KvCache::place(const Batch & batch, std::vector<int64_t> & cells) {
    cells.clear();
    for (int32_t c = 0; c < n_cells() && (int) cells.size() < batch.size(); ++c) {
        if (cells_[c].pos < 0) cells.push_back(c);
    }
    if ((int) cells.size() < batch.size()) {
        cells.clear();
        return false;
    }
    for (int i = 0; i < batch.size(); ++i) {
        cells_[cells[i]] = Cell{batch.pos[i], batch.seq[i]};
    }
    update_used_end();
    return true;
}

void KvCache::unplace(const std::vector<int64_t> & cells) {
    for (int64_t c : cells) cells_[c] = Cell{};
    update_used_end();
}

int32_t KvCache::window() const {
    const int32_t g = kWindowGranularity;
    const int32_t w = std::max<int32_t>(1, (used_end_ + g - 1) / g) * g;
    return std::min(w, n_cells());
}

void KvCache::fill_mask(const Batch & batch, int32_t window, ggml_fp16_t * mask) const {
    const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f);
    const ggml_fp16_t ninf = ggml_fp32_to_fp16(-INFINITY);
    for (int t = 0; t < batch.size(); ++t) {
        ggml_fp16_t * row = mask + (size_t) t * window;
        for (int32_t c = 0; c < window; ++c) {
            const Cell & cell = cells_[c];
            const bool visible = cell.pos >= 0 && cell.seq == batch.seq[t] && cell.pos <= batch.pos[t];
            row[c] = visible ? zero : ninf;
        }
    }
}

void KvCache::seq_remove(int32_t seq, int32_t p0, int32_t p1) {
    if (p1 < 0) p1 = INT32_MAX;
    for (Cell & c : cells_) {
        if (c.pos >= 0 && c.seq == seq && c.pos >= p0 && c.pos < p1) c = Cell{};
    }
    update_used_end();
}

int32_t KvCache::seq_pos_max(int32_t seq) const {
    int32_t m = -1;
    for (const Cell & c : cells_) {
        if (c.pos >= 0 && c.seq == seq) m = std::max(m, c.pos);
    }
    return m;
}

void KvCache::update_used_end() {
    used_end_ = 0;
    for (int32_t c = n_cells() - 1; c >= 0; --c) {
        if (cells_[c].pos >= 0) {
            used_end_ = c + 1;
            break;
        }
    }
}

}  // namespace llama_tp
