#pragma once
// The key/value cache: per layer one K and one V tensor of n_cells rows, and
// per cell which sequence and position it holds. Cells of all sequences share
// one pool; attention masks keep sequences apart.

#include "plugin/batch.h"
#include "plugin/hparams.h"

#include <cstdint>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpp.h"

struct ggml_context;
struct ggml_tensor;

namespace llama_tp {

class KvCache {
  public:
    // n_head_kv: the KV heads this cache stores (a rank's share under tensor parallelism).
    KvCache(const HParams & hp, int32_t n_head_kv, int32_t n_cells, int32_t n_seq_max, ggml_backend_buffer_type_t buft);
    KvCache(const KvCache &) = delete;
    KvCache & operator=(const KvCache &) = delete;

    ggml_tensor * k(int il) const { return k_[il]; }
    ggml_tensor * v(int il) const { return v_[il]; }
    int32_t n_cells() const { return (int32_t) cells_.size(); }
    int32_t n_seq_max() const { return n_seq_max_; }
    int32_t n_free() const;
    size_t bytes() const { return ggml_backend_buffer_get_size(buffer_.get()); }

    // Chooses a free cell for every batch token and records the tokens there.
    // Returns false (changing nothing) when there are not enough free cells.
    bool place(const Batch & batch, std::vector<int64_t> & cells);
    // Undoes place() for a batch whose compute failed.
    void unplace(const std::vector<int64_t> & cells);

    // Cells [0, window) hold every used cell; rounded up so that the attention
    // shape (and so the graph) stays the same for many decode steps.
    int32_t window() const;
    // mask[t * window + c] = 0 where token t of the batch may attend to cell c, -inf elsewhere.
    void fill_mask(const Batch & batch, int32_t window, ggml_fp16_t * mask) const;

    void seq_remove(int32_t seq, int32_t p0, int32_t p1);
    int32_t seq_pos_max(int32_t seq) const;

    static constexpr int32_t kWindowGranularity = 256;

  private:
    struct Cell {
        int32_t pos = -1;  // -1: free
        int32_t seq = -1;
    };
    std::vector<Cell> cells_;
    int32_t n_seq_max_;
    int32_t used_end_ = 0;  // one past the highest used cell
    ggml_context_ptr ctx_;
    ggml_backend_buffer_ptr buffer_;
    std::vector<ggml_tensor *> k_, v_;

    void update_used_end();
};

}  // namespace llama_tp
