#include "plugin/kv_cache.h"

#include "plugin/error.h"

#include "ggml.h"

namespace llama_tp {

KvCache::KvCache(const HParams & hp, int32_t n_head_kv, int32_t n_cells, int32_t n_seq_max, bool unified,
                 ggml_backend_buffer_type_t buft)
    : KvCells(n_cells, n_seq_max, unified) {
    ggml_init_params params = {2 * (size_t) hp.n_layer * ggml_tensor_overhead(), nullptr, true};
    ctx_.reset(ggml_init(params));
    if (!ctx_) throw Error("out of memory creating the KV cache context");
    const int64_t row = (int64_t) n_head_kv * hp.head_dim;
    for (int il = 0; il < hp.n_layer; ++il) {
        ggml_tensor * k = ggml_new_tensor_2d(ctx_.get(), GGML_TYPE_F16, row, (int64_t) this->n_cells());
        ggml_tensor * v = ggml_new_tensor_2d(ctx_.get(), GGML_TYPE_F16, row, (int64_t) this->n_cells());
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

}  // namespace llama_tp
