#include "runtime/engine.h"
#include "runtime/kv/kv_pools.h"
#include "runtime/kv/layer_state.h"
#include "runtime/model/gguf_file.h"
#include "runtime/model/hparams.h"

namespace llama_tp {

KvFootprint kv_footprint(const EngineOptions & options) {
    GgufFile file(options.model_path, options.metadata_overrides);
    const HParams hp = read_hparams(file);
    KvFootprint kv;
    kv.n_ctx_train = hp.n_ctx_train;
    const int32_t window = options.swa_full ? 0 : KvPoolSizes::window_cells_per_sequence(hp, options.n_batch);
    // F16 keys and values, per rank with all of the KV heads (an upper bound
    // under tensor parallelism, exact for latent attention's one row).
    for (int il = 0; il < hp.n_layer_kv(); ++il) {
        if (!hp.keeps_kv(il)) continue;
        // Latent attention keeps keys only (its values are their first columns).
        const LayerShape & s = hp.layer(il);
        const uint64_t values = hp.block(il).attention.values_in_keys() ? 0u : (uint64_t) s.n_head_kv * s.v_dim();
        const uint64_t bytes = ((uint64_t) hp.n_embd_kv(il) + values) * 2u;
        if (window > 0 && hp.is_swa(il)) {
            kv.fixed_bytes_per_slot += bytes * (uint64_t) window;
        } else {
            kv.bytes_per_cell += bytes;
        }
    }
    const uint64_t state = delta_net_state(hp.delta, hp.delta.n_k_heads).bytes();
    for (int il = 0; il < hp.n_layer; ++il) {
        if (!hp.keeps_kv(il)) kv.fixed_bytes_per_slot += options.draft_states ? 2 * state : state;
    }
    kv.weight_bytes = file.file_size();
    return kv;
}

}  // namespace llama_tp
