// What a slot reuses of an earlier prompt: the host-memory prompt cache and
// the checkpoints a sliding window needs to resume.
#include "server/serving/scheduler/scheduler.h"

#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "server/log.h"
#include "server/serving/scheduler/task_events.h"
#include "server/serving/cache/token_prefix.h"

#include "reasoning-budget.h"

#include <algorithm>

namespace llama_tp::server {

// Before a slot takes a task: the cells it would lose (more than half of
// them, or all when the task reuses none) go to the prompt cache, and a kept
// prompt that gives the task more than `have` tokens comes back into the
// slot. Either step failing only costs time: the prompt is then computed.
void Scheduler::exchange_with_prompt_cache(Slot & slot, const Task & task, size_t have) {
    if (!prompt_cache_.enabled()) return;
    const size_t n = slot.kv_tokens.size();
    const bool loses = !task.cache_prompt || 2 * resumable_prefix(slot, task) < n;
    if (n > 0 && loses && !prompt_cache_.covers(slot.kv_tokens, slot.kv_lora)) keep_in_prompt_cache(slot);
    if (!task.cache_prompt) return;
    // The prompt's last token is always decoded (for its logits).
    const size_t usable = task.prompt.size() - 1;
    std::optional<CachedPrompt> found = prompt_cache_.take(task.prompt, task.lora, std::min(have, usable), usable);
    if (!found) return;
    try {
        engine_.write_sequence(slot.id, found->tokens, found->image);
    } catch (const std::exception & e) {
        SRV_WRN("slot %d: a prompt of the prompt cache could not be restored: %s", slot.id, e.what());
        slot.clear_cache(engine_);
        prompt_cache_.keep(std::move(*found));
        return;
    }
    slot.kv_tokens = found->tokens;
    slot.kv_lora = found->lora;
    slot.checkpoint_at = found->checkpoint_of >= 0 ? found->tokens.size() : 0;
    SRV_INF("slot %d: %zu of %zu prompt tokens restored from the prompt cache%s", slot.id,
            std::min(common_prefix(found->tokens, task.prompt), usable), task.prompt.size(),
            found->checkpoint_of >= 0 ? " (a context checkpoint)" : "");
    // A checkpoint serves again (a regenerated answer, another branch of the turn).
    if (found->checkpoint_of >= 0) prompt_cache_.keep(std::move(*found));
}

size_t Scheduler::resumable_prefix(const Slot & slot, const Task & task) const {
    const size_t p = std::min(slot.reusable_prefix(task), task.prompt.empty() ? 0 : task.prompt.size() - 1);
    return engine_.seq_resumable(slot.id, (int32_t) p) ? p : 0;
}

// 4 tokens before the prompt's end, as one of llama-server's checkpoints: a
// next prompt often renders the last ones differently (the generation
// prompt, an end-of-turn marker).
constexpr size_t kCheckpointTail = 4;

// Where llama-server takes a checkpoint: 4 tokens before the prompt's end,
// where the last user message opens (a regenerated or edited turn parts
// there), and where an earlier one opens more than --checkpoint-min-step
// tokens past the slot's newest checkpoint (or the first, with none).
bool Scheduler::checkpoint_due(const Slot & slot, size_t n) const {
    const Task & task = *slot.task;
    if (n == 0 || n >= task.prompt.size()) return false;
    if (n + kCheckpointTail == task.prompt.size()) return true;
    const auto & users = task.user_starts;
    if (!std::binary_search(users.begin(), users.end(), n)) return false;
    return n == users.back() || slot.checkpoint_at == 0 || n > slot.checkpoint_at + (size_t) checkpoint_min_step_;
}

size_t Scheduler::next_checkpoint(const Slot & slot) const {
    if (ctx_checkpoints_ == 0 || slot.state != Slot::State::Prompt) return SIZE_MAX;
    const Task & task = *slot.task;
    // A request that keeps nothing of its cache has no later prompt to serve.
    if (task.embedding || !task.cache_prompt) return SIZE_MAX;
    // The user messages still ahead, then the tail (the newest checkpoint
    // moves only when one is taken, so the first due one is the next).
    for (auto it = std::upper_bound(task.user_starts.begin(), task.user_starts.end(), slot.n_prompt_done);
         it != task.user_starts.end(); ++it) {
        if (checkpoint_due(slot, *it)) return *it;
    }
    const size_t tail = task.prompt.size() > kCheckpointTail ? task.prompt.size() - kCheckpointTail : 0;
    return tail > slot.n_prompt_done ? tail : SIZE_MAX;
}

void Scheduler::checkpoint(Slot & slot) {
    const size_t n = slot.kv_tokens.size();
    if (!slot.task->cache_prompt || !checkpoint_due(slot, n)) return;
    slot.checkpoint_at = n;
    if (prompt_cache_.covers(slot.kv_tokens, slot.kv_lora)) return;
    keep_in_prompt_cache(slot, true);
    prompt_cache_.drop_checkpoints_beyond(slot.id, (size_t) ctx_checkpoints_);
}

void Scheduler::keep_in_prompt_cache(const Slot & slot, bool checkpoint) {
    const size_t n = slot.kv_tokens.size();
    const size_t bytes = engine_.sequence_image_bytes((int32_t) n);
    const double mib = (double) bytes / (1024.0 * 1024.0);
    if (!prompt_cache_.fits(bytes)) {
        SRV_DBG("slot %d: %zu tokens (%.1f MiB) are more than --cache-ram holds; not kept", slot.id, n, mib);
        return;
    }
    try {
        prompt_cache_.keep(CachedPrompt{slot.kv_tokens, slot.kv_lora, engine_.read_sequence(slot.id, (int32_t) n),
                                        checkpoint ? slot.id : -1});
        SRV_DBG("slot %d: %zu tokens (%.1f MiB) kept in the prompt cache%s, which holds %zu prompts, %.1f MiB", slot.id,
                n, mib, checkpoint ? " as a context checkpoint" : "", prompt_cache_.size(),
                (double) prompt_cache_.bytes() / (1024.0 * 1024.0));
    } catch (const std::exception & e) {
        SRV_WRN("slot %d: its cells could not be kept in the prompt cache: %s", slot.id, e.what());
    }
}

}  // namespace llama_tp::server
