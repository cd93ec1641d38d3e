#include "server/slot.h"

#include "server/token_prefix.h"

#include <algorithm>

namespace llama_tp::server {

size_t Slot::common_prefix(const std::vector<int32_t> & tokens) const {
    return server::common_prefix(kv_tokens, tokens);
}

void Slot::begin(std::unique_ptr<Task> t, Engine & engine, const Slot * donor) {
    task = std::move(t);
    const size_t most = task->prompt.empty() ? 0 : task->prompt.size() - 1;
    size_t keep = task->cache_prompt ? std::min(reusable_prefix(*task), most) : 0;
    // Sliding-window layers may have dropped what a shorter prefix reads.
    if (!engine.seq_resumable(id, (int32_t) keep)) keep = 0;
    if (keep < kv_tokens.size()) {
        engine.seq_remove(id, (int32_t) keep, -1);
        kv_tokens.resize(keep);
    }
    if (donor && task->cache_prompt) {
        const size_t n = std::min(donor->reusable_prefix(*task), most);
        if (n > keep && engine.seq_copy(donor->id, id, (int32_t) keep, (int32_t) n)) {
            kv_tokens.insert(kv_tokens.end(), task->prompt.begin() + (long) keep, task->prompt.begin() + (long) n);
            keep = n;
        }
    }
    kv_lora = task->lora;
    n_prompt_done = keep;
    n_cached = (int32_t) keep;
    pending = -1;
    n_decoded = 0;
    has_new_line = false;
    hidden.clear();
    prompt_in_step = false;
    stream = TextStream(task->stop);
    logits_row = -1;
    inflight.clear();
    t_start = std::chrono::steady_clock::now();
    t_first_token = t_start;
    state = State::Prompt;
}

std::unique_ptr<Task> Slot::release() {
    state = State::Idle;
    t_last_used = std::chrono::steady_clock::now();
    pending = -1;
    logits_row = -1;
    inflight.clear();
    return std::move(task);
}

void Slot::clear_cache(Engine & engine) {
    engine.seq_remove(id, 0, -1);
    kv_tokens.clear();
    inflight.clear();
}

}  // namespace llama_tp::server
