#include "server/serving/slot.h"

#include "server/serving/cache/token_prefix.h"

#include <algorithm>

namespace llama_tp::server {

size_t Slot::common_prefix(const std::vector<int32_t> & tokens) const {
    return server::common_prefix(kv_tokens, tokens);
}

// llama-server's --cache-reuse: past the common prefix, each run of at least
// min_chunk cached tokens that the prompt holds next is moved back to the
// prompt's positions (the engine rotates its keys) and what lies between is
// dropped. The moved cells keep what they computed in their old context, as
// upstream's do. Returns the new prefix length; the cache beyond it is gone.
size_t Slot::reuse_chunks(Engine & engine, size_t keep, size_t most, int32_t min_chunk) {
    const std::vector<int32_t> & prompt = task->prompt;
    size_t head_c = keep;  // in the cache
    size_t head_p = keep;  // in the prompt (never past head_c: chunks only move back)
    while (head_c < kv_tokens.size() && head_p < most) {
        size_t n = 0;
        while (head_c + n < kv_tokens.size() && head_p + n < most && kv_tokens[head_c + n] == prompt[head_p + n]) n++;
        if (n < (size_t) min_chunk) {
            head_c++;
            continue;
        }
        if (head_c > head_p) engine.seq_remove(id, (int32_t) head_p, (int32_t) head_c);
        engine.seq_shift(id, (int32_t) head_c, (int32_t) (head_c + n), (int32_t) head_p - (int32_t) head_c);
        if (head_c > head_p) {
            std::copy(kv_tokens.begin() + (long) head_c, kv_tokens.begin() + (long) (head_c + n),
                      kv_tokens.begin() + (long) head_p);
        }
        head_c += n;
        head_p += n;
    }
    engine.seq_remove(id, (int32_t) head_p, -1);
    kv_tokens.resize(head_p);
    // Sliding-window layers may lack the cells the last window reads: back to the prefix.
    if (head_p > keep && !engine.seq_resumable(id, (int32_t) head_p)) {
        engine.seq_remove(id, (int32_t) keep, -1);
        kv_tokens.resize(keep);
        return keep;
    }
    return head_p;
}

void Slot::begin(std::unique_ptr<Task> t, Engine & engine, const Slot * donor) {
    task = std::move(t);
    const size_t most = task->prompt.empty() ? 0 : task->prompt.size() - 1;
    size_t keep = task->cache_prompt ? std::min(reusable_prefix(*task), most) : 0;
    // Sliding-window layers may have dropped what a shorter prefix reads.
    if (!engine.seq_resumable(id, (int32_t) keep)) keep = 0;
    const size_t from_donor = donor && task->cache_prompt ? std::min(donor->reusable_prefix(*task), most) : 0;
    if (keep < kv_tokens.size()) {
        const bool reuse =
            task->cache_prompt && task->n_cache_reuse > 0 && task->lora == kv_lora && engine.can_rewind();
        if (reuse && from_donor <= keep) {
            keep = reuse_chunks(engine, keep, most, task->n_cache_reuse);
        } else {
            engine.seq_remove(id, (int32_t) keep, -1);
            kv_tokens.resize(keep);
        }
    }
    if (from_donor > keep && engine.seq_copy(donor->id, id, (int32_t) keep, (int32_t) from_donor)) {
        kv_tokens.insert(kv_tokens.end(), task->prompt.begin() + (long) keep, task->prompt.begin() + (long) from_donor);
        keep = from_donor;
    }
    kv_lora = task->lora;
    if (checkpoint_at > keep) checkpoint_at = 0;
    n_prompt_done = keep;
    n_cached = (int32_t) keep;
    pending = -1;
    n_decoded = 0;
    truncated = false;
    n_drafted = 0;
    n_draft_accepted = 0;
    draft.clear();
    replay.clear();
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
    if (task) last_task = TaskSummary::of(*task);
    state = State::Idle;
    t_last_used = std::chrono::steady_clock::now();
    pending = -1;
    logits_row = -1;
    inflight.clear();
    draft.clear();
    replay.clear();
    return std::move(task);
}

void Slot::clear_cache(Engine & engine) {
    engine.seq_remove(id, 0, -1);
    kv_tokens.clear();
    inflight.clear();
    replay.clear();
    checkpoint_at = 0;
}

}  // namespace llama_tp::server
