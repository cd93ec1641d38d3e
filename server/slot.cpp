#include "server/slot.h"

namespace llama_tp::server {

size_t Slot::common_prefix(const std::vector<int32_t> & tokens) const {
    size_t n = 0;
    while (n < kv_tokens.size() && n < tokens.size() && kv_tokens[n] == tokens[n]) {
        n++;
    }
    return n;
}

void Slot::begin(std::unique_ptr<Task> t, Engine & engine) {
    task = std::move(t);
    size_t keep = task->cache_prompt ? common_prefix(task->prompt) : 0;
    if (keep >= task->prompt.size()) {
        keep = task->prompt.empty() ? 0 : task->prompt.size() - 1;
    }
    if (keep < kv_tokens.size()) {
        engine.seq_remove(id, (int32_t) keep, -1);
        kv_tokens.resize(keep);
    }
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
