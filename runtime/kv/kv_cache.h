#pragma once
// The key/value cache: per layer one K and one V tensor with a row per cell
// of its pool (sliding-window layers: the window pool where there is one; a
// layer that shares an earlier layer's cache, HParams::kv_layer, has that
// layer's), and the cells' bookkeeping (KvPools: which sequence and position
// each holds). A linear-attention layer keeps instead, per sequence, a row
// of its convolution's last inputs and a row of its delta-rule state (F32,
// as upstream keeps them), of the rank's heads.

#include "runtime/model/hparams.h"
#include "runtime/kv/kv_pools.h"

#include <cstdint>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpp.h"

struct ggml_context;
struct ggml_tensor;

namespace llama_tp {

// The element types of the cache's keys and values (F16 unless asked).
struct KvTypes {
    ggml_type k = GGML_TYPE_F16;
    ggml_type v = GGML_TYPE_F16;
    bool both_f16() const { return k == GGML_TYPE_F16 && v == GGML_TYPE_F16; }
};

// A cache element type by llama-server's name (f32, f16, bf16, q8_0, q4_0,
// q4_1, q5_0, q5_1, iq4_nl). Throws llama_tp::Error listing them otherwise.
ggml_type kv_type_from_name(const std::string & name);
const char * kv_type_name(ggml_type type);
// Throws llama_tp::Error when a head of head_dim elements is not whole blocks of the type.
void check_kv_type(ggml_type type, int32_t head_dim, const char * which);

class KvCache : public KvPools {
  public:
    // n_head_kv: per layer, the KV heads this cache stores (a rank's share
    // under tensor parallelism); delta_k_heads: the linear attention's key
    // heads it stores the state of (their value heads with them).
    KvCache(const HParams & hp, const std::vector<int32_t> & n_head_kv, const KvPoolSizes & sizes, KvTypes types,
            ggml_backend_buffer_type_t buft, int32_t delta_k_heads = 0);
    KvCache(const KvCache &) = delete;
    KvCache & operator=(const KvCache &) = delete;

    ggml_tensor * k(int il) const { return k_[source_[il]]; }
    ggml_tensor * v(int il) const { return v_[source_[il]]; }  // nullptr for latent attention (values in its keys)
    // A linear-attention layer's states: [row, n_seq_max] each (nullptr elsewhere).
    ggml_tensor * conv_state(int il) const { return conv_[il]; }
    ggml_tensor * delta_state(int il) const { return delta_[il]; }
    // Whether layer il's cells are the window pool's.
    bool windowed(int il) const { return windowed_[source_[il]]; }
    // Moves the window pool's rows as a placement or copy packed them.
    void move(const std::vector<KvMove> & moves);
    size_t bytes() const { return ggml_backend_buffer_get_size(buffer_.get()); }
    const KvTypes & types() const { return types_; }

  private:
    ggml_context_ptr ctx_;
    ggml_backend_buffer_ptr buffer_;
    std::vector<ggml_tensor *> k_, v_;         // per layer with a cache of its own (nullptr: a state instead)
    std::vector<ggml_tensor *> conv_, delta_;  // per layer
    std::vector<int> source_;                  // per layer: whose cache it reads
    std::vector<bool> windowed_;               // per layer with a cache of its own
    KvTypes types_;
};

}  // namespace llama_tp
