#pragma once
// The KV context a server gets when the command line gives no -c, or gives
// one and leaves the slots to the automatic choice: every slot may hold the
// context, as far as the cache fits in half of the memory the weights leave
// free, and without -c also in kDefaultKvCeiling (a 128K-context 8B model
// would take 16 GiB of KV cache, whatever the host).

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace llama_tp::server {

// The most the KV cache takes without -c (F16 cells: an 8B model's 64K
// cells); -c N gives the N cells asked for.
constexpr uint64_t kDefaultKvCeiling = uint64_t(8) << 30;

struct ContextChoice {
    int32_t n_ctx = 0;     // cells in all
    int32_t per_slot = 0;  // cells one slot may use: n_ctx / slots, or n_ctx when shared
    bool shared = false;   // one pool of n_ctx cells for every slot (llama-server's kv_unified)
    std::string reason;    // one line for the log
};

ContextChoice fit_context(const KvFootprint & kv, int32_t n_slots, uint64_t available_bytes);

// -c N with the slots left to llama-server's automatic choice, where every
// slot may use all N cells of a shared pool: each slot gets a region of N
// cells (the faster layout) when n_slots of them fit in half of the memory
// the weights leave free, else the slots share N cells as llama-server's do.
// n_ctx 0: the training context.
ContextChoice fit_requested_context(const KvFootprint & kv, int32_t n_slots, int32_t n_ctx, uint64_t available_bytes);

// MemAvailable of /proc/meminfo; 0 when it cannot be read.
uint64_t available_memory_bytes();

}  // namespace llama_tp::server
