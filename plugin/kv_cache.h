#pragma once
// The key/value cache: per layer one K and one V tensor of n_cells rows, and
// the cells' bookkeeping (KvCells: which sequence and position each holds).

#include "plugin/hparams.h"
#include "plugin/kv_cells.h"

#include <cstdint>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpp.h"

struct ggml_context;
struct ggml_tensor;

namespace llama_tp {

class KvCache : public KvCells {
  public:
    // n_head_kv: the KV heads this cache stores (a rank's share under tensor parallelism).
    KvCache(const HParams & hp, int32_t n_head_kv, int32_t n_cells, int32_t n_seq_max, bool unified,
            ggml_backend_buffer_type_t buft);
    KvCache(const KvCache &) = delete;
    KvCache & operator=(const KvCache &) = delete;

    ggml_tensor * k(int il) const { return k_[il]; }
    ggml_tensor * v(int il) const { return v_[il]; }
    size_t bytes() const { return ggml_backend_buffer_get_size(buffer_.get()); }

  private:
    ggml_context_ptr ctx_;
    ggml_backend_buffer_ptr buffer_;
    std::vector<ggml_tensor *> k_, v_;
};

}  // namespace llama_tp
