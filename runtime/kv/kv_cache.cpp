#include "runtime/kv/kv_cache.h"

#include "runtime/error.h"
#include "runtime/kv/layer_state.h"

#include "ggml.h"

namespace llama_tp {

namespace {

const ggml_type kKvTypes[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,  GGML_TYPE_Q4_0,
                              GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL};

}  // namespace

ggml_type kv_type_from_name(const std::string & name) {
    std::string known;
    for (ggml_type t : kKvTypes) {
        if (name == ggml_type_name(t)) return t;
        known += (known.empty() ? "" : ", ") + std::string(ggml_type_name(t));
    }
    throw Error("unknown KV cache type '" + name + "' (one of: " + known + ")");
}

const char * kv_type_name(ggml_type type) {
    return ggml_type_name(type);
}

void check_kv_type(ggml_type type, int32_t head_dim, const char * which) {
    bool known = false;
    for (ggml_type t : kKvTypes) known |= t == type;
    if (!known) throw Error(std::string(which) + " cache type " + ggml_type_name(type) + " is not supported");
    if (head_dim % ggml_blck_size(type) != 0) {
        throw Error(std::string(which) + " cache type " + ggml_type_name(type) + " stores blocks of " +
                    std::to_string(ggml_blck_size(type)) + " values, which a head of " + std::to_string(head_dim) +
                    " does not divide into");
    }
}

KvCache::KvCache(const HParams & hp, const std::vector<int32_t> & n_head_kv, const KvPoolSizes & sizes, KvTypes types,
                 ggml_backend_buffer_type_t buft, int32_t delta_k_heads)
    : KvPools(sizes), types_(types) {
    ggml_init_params params = {4 * (size_t) hp.n_layer * ggml_tensor_overhead(), nullptr, true};
    ctx_.reset(ggml_init(params));
    if (!ctx_) throw Error("out of memory creating the KV cache context");
    for (int il = 0; il < hp.n_layer; ++il) source_.push_back(hp.kv_layer(il));
    const DeltaNetState state = delta_net_state(hp.delta, delta_k_heads);
    // A row per sequence, and a second one for its saved state.
    const int64_t rows = (int64_t) sizes.n_seq_max * (sizes.saved_states ? 2 : 1);
    for (int il = 0; il < hp.n_layer; ++il) {
        const bool keeps_state = !hp.keeps_kv(il);
        conv_.push_back(keeps_state ? ggml_new_tensor_2d(ctx_.get(), GGML_TYPE_F32, state.conv_row(), rows) : nullptr);
        delta_.push_back(keeps_state ? ggml_new_tensor_2d(ctx_.get(), GGML_TYPE_F32, state.delta_row(), rows)
                                     : nullptr);
        if (keeps_state) {
            ggml_format_name(conv_.back(), "conv_state_l%d", il);
            ggml_format_name(delta_.back(), "delta_state_l%d", il);
        }
    }
    for (int il = 0; il < hp.n_layer_kv(); ++il) {
        windowed_.push_back(sizes.windowed() && hp.is_swa(il));
        if (!hp.keeps_kv(il)) {
            k_.push_back(nullptr);
            v_.push_back(nullptr);
            continue;
        }
        const int64_t row = (int64_t) n_head_kv[il] * hp.layer(il).head_dim;
        const int64_t rows = windowed_.back() ? window()->n_cells() : all().n_cells();
        ggml_tensor * k = ggml_new_tensor_2d(ctx_.get(), types.k, row, rows);
        ggml_format_name(k, "cache_k_l%d", il);
        k_.push_back(k);
        // Latent attention reads its values out of its keys' rows.
        ggml_tensor * v =
            hp.block(il).attention.values_in_keys()
                ? nullptr
                : ggml_new_tensor_2d(ctx_.get(), types.v, (int64_t) n_head_kv[il] * hp.layer(il).v_dim(), rows);
        if (v) ggml_format_name(v, "cache_v_l%d", il);
        v_.push_back(v);
    }
    buffer_.reset(ggml_backend_alloc_ctx_tensors_from_buft(ctx_.get(), buft));
    if (!buffer_) {
        throw Error("out of memory allocating a KV cache of " + std::to_string(sizes.n_cells) + " cells");
    }
    // Free cells are masked out, but 0 * NaN garbage must never reach a sum.
    ggml_backend_buffer_clear(buffer_.get(), 0);
}

void KvCache::move(const std::vector<KvMove> & moves) {
    if (moves.empty()) return;
    std::vector<uint8_t> rows;
    for (size_t il = 0; il < k_.size(); ++il) {
        if (!windowed_[il] || !k_[il]) continue;
        for (ggml_tensor * t : {k_[il], v_[il]}) {
            if (!t) continue;
            const size_t row = t->nb[1];
            // Runs of consecutive moves by the same distance, each read whole
            // before it is written: a run lands below its own rows and every
            // later run's.
            for (size_t i = 0; i < moves.size();) {
                size_t n = 1;
                while (i + n < moves.size() && moves[i + n].from == moves[i].from + (int64_t) n &&
                       moves[i + n].to == moves[i].to + (int64_t) n) {
                    ++n;
                }
                rows.resize(n * row);
                ggml_backend_tensor_get(t, rows.data(), (size_t) moves[i].from * row, n * row);
                ggml_backend_tensor_set(t, rows.data(), (size_t) moves[i].to * row, n * row);
                i += n;
            }
        }
    }
}

}  // namespace llama_tp
