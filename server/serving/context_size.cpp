#include "server/serving/context_size.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace llama_tp::server {

namespace {

constexpr int32_t kCellStep = 256;  // fitted contexts are multiples of this

std::string gib(uint64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / 1073741824.0);
    return buf;
}

// What the KV cache may take: half of the memory the weights leave free, and
// at most `ceiling`.
struct KvBudget {
    uint64_t bytes = 0;
    std::string what;  // for the log: "half of the 27.3 GiB the weights leave free"
};

KvBudget kv_budget(const KvFootprint & kv, uint64_t available_bytes, uint64_t ceiling) {
    const uint64_t spare = available_bytes > kv.weight_bytes ? available_bytes - kv.weight_bytes : 0;
    if (spare / 2 > ceiling) {
        return {ceiling, "the " + gib(ceiling) + " a cache takes without -c (half of the " + gib(spare) +
                             " the weights leave free is more)"};
    }
    return {spare / 2, "half of the " + gib(spare) + " the weights leave free"};
}

}  // namespace

ContextChoice fit_context(const KvFootprint & kv, int32_t n_slots, uint64_t available_bytes) {
    ContextChoice c;
    const int32_t train = std::max<int32_t>(kv.n_ctx_train, 1);
    c.per_slot = train;
    c.reason = "the model's training context per slot";
    if (available_bytes > 0 && kv.bytes_per_cell > 0) {
        const KvBudget budget = kv_budget(kv, available_bytes, kDefaultKvCeiling);
        const uint64_t per_slot = budget.bytes / (uint64_t) n_slots;
        const uint64_t fits =
            per_slot > kv.fixed_bytes_per_slot ? (per_slot - kv.fixed_bytes_per_slot) / kv.bytes_per_cell : 0;
        if (fits < (uint64_t) train) {
            const int32_t floor_cells = std::min(train, kCellStep);
            c.per_slot = std::max<int32_t>(floor_cells, (int32_t) (fits / kCellStep * kCellStep));
            c.reason = "training context " + std::to_string(train) + " per slot limited so that the KV cache (" +
                       gib((kv.bytes_per_cell * (uint64_t) c.per_slot + kv.fixed_bytes_per_slot) * n_slots) +
                       ") fits in " + budget.what;
        }
    }
    c.n_ctx = c.per_slot * n_slots;
    return c;
}

ContextChoice fit_requested_context(const KvFootprint & kv, int32_t n_slots, int32_t n_ctx, uint64_t available_bytes) {
    ContextChoice c;
    c.per_slot = n_ctx > 0 ? n_ctx : std::max<int32_t>(kv.n_ctx_train, 1);
    const uint64_t regions = (kv.bytes_per_cell * (uint64_t) c.per_slot + kv.fixed_bytes_per_slot) * n_slots;
    // -c sized the cache: regions of its cells are only a layout, within
    // half of the free memory however large.
    const KvBudget budget = kv_budget(kv, available_bytes, UINT64_MAX);
    if (available_bytes > 0 && regions <= budget.bytes && (int64_t) c.per_slot * n_slots <= INT32_MAX) {
        c.n_ctx = c.per_slot * n_slots;
        c.reason = "every slot its own " + std::to_string(c.per_slot) + " cells, as the KV cache (" + gib(regions) +
                   ") fits in " + budget.what;
        return c;
    }
    c.n_ctx = c.per_slot;
    c.shared = true;
    c.reason = "the slots share " + std::to_string(c.per_slot) + " cells, any slot up to all of them, as " +
               (available_bytes > 0
                    ? "a region of that many cells for each slot (" + gib(regions) + ") would not fit in " + budget.what
                    : std::string("the free memory is unknown"));
    return c;
}

uint64_t available_memory_bytes() {
    std::ifstream f("/proc/meminfo");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("MemAvailable:", 0) != 0) continue;
        std::istringstream ss(line.substr(13));
        uint64_t kib = 0;
        ss >> kib;
        return kib * 1024;
    }
    return 0;
}

}  // namespace llama_tp::server
