// Admission and batching: queued tasks to idle slots, and each step's batch
// (prompt chunks, generated tokens, drafts) within the KV cells left.
#include "server/serving/scheduler/scheduler.h"

#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "server/log.h"
#include "server/serving/scheduler/task_events.h"
#include "server/serving/cache/token_prefix.h"

#include "reasoning-budget.h"

#include <algorithm>

namespace llama_tp::server {

void Scheduler::admit() {
    for (;;) {
        Admission a;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!next_admission(a)) return;
        }
        // Outside the lock: the prompt cache's images may be large, and
        // submissions need not wait for them.
        if (!a.task->embedding) exchange_with_prompt_cache(*a.slot, *a.task, a.have);
        a.slot->begin(std::move(a.task), engine_, a.donor);
        busy_++;
        SRV_DBG("slot %d: task %llu, prompt %zu tokens (%d cached), n_predict %d", a.slot->id,
                (unsigned long long) a.slot->task->id, a.slot->task->prompt.size(), a.slot->n_cached,
                a.slot->task->n_predict);
    }
}

// Takes the first queued task that can start now out of the queue, with its
// slot; drops cancelled and empty ones on the way. Under mutex_.
bool Scheduler::next_admission(Admission & a) {
    for (auto it = queue_.begin(); it != queue_.end();) {
        auto & task = *it;
        if (task->channel->cancelled()) {
            it = queue_.erase(it);
            continue;
        }
        if (task->prompt.empty()) {
            task->channel->push(error_event(400, "the prompt is empty"));
            it = queue_.erase(it);
            continue;
        }
        if (std::none_of(slots_.begin(), slots_.end(), [](const auto & s) { return !s->busy(); })) return false;
        Slot * best = choose_slot(*task);
        if (best == nullptr) {
            ++it;  // its slot is busy: it waits, later tasks may go first
            continue;
        }
        const size_t best_prefix = best->reusable_prefix(*task);
        const PrefixDonor donor = prefix_donor(*task, *best, best_prefix);
        if (donor.wait) {
            ++it;  // another slot is computing most of this prompt: copy it when done
            continue;
        }
        a.slot = best;
        a.donor = donor.slot;
        a.have = donor.slot ? donor.slot->reusable_prefix(*task) : resumable_prefix(*best, *task);
        a.task = std::move(task);
        queue_.erase(it);
        return true;
    }
    return false;
}

// The task's own slot (id_slot), else the idle slot whose cache shares the
// longest prefix with the prompt if that is over prompt_similarity_ of it,
// else the least recently used idle slot (one never used before any other):
// a task that reuses no prefix does not take the cells a later one may use.
Slot * Scheduler::choose_slot(const Task & task) const {
    Slot * similar = nullptr;
    Slot * oldest = nullptr;
    size_t similar_prefix = 0;
    for (const auto & slot : slots_) {
        if (slot->busy() || (task.id_slot >= 0 && slot->id != task.id_slot)) continue;
        const size_t p = slot->reusable_prefix(task);
        if (task.cache_prompt && prompt_similarity_ > 0.0f &&
            (double) p > prompt_similarity_ * (double) task.prompt.size() && p > similar_prefix) {
            similar = slot.get();
            similar_prefix = p;
        }
        if (oldest == nullptr || slot->t_last_used < oldest->t_last_used) oldest = slot.get();
    }
    return similar ? similar : oldest;
}

// The slot whose cache holds the longest prefix of the task's prompt, when
// longer than the one the chosen slot holds; or wait, when a slot still
// computing its prompt shares at least half of this one and 16 tokens more
// than any cache holds now (the choices of an n > 1 request, prompts with one
// long system message).
Scheduler::PrefixDonor Scheduler::prefix_donor(const Task & task, const Slot & chosen, size_t own) const {
    PrefixDonor donor;
    size_t best = own;
    for (const auto & slot : slots_) {
        if (slot.get() == &chosen) continue;
        const size_t p = slot->reusable_prefix(task);
        if (p > best) {
            best = p;
            donor.slot = slot.get();
        }
    }
    if (!task.cache_prompt) return PrefixDonor{};
    // What the prompt cache keeps counts too: no waiting for a slot to compute less.
    const size_t kept = prompt_cache_.longest_prefix(task.prompt, task.lora, task.prompt.size() - 1);
    for (const auto & slot : slots_) {
        if (slot->state != Slot::State::Prompt || slot.get() == &chosen || slot->task->lora != task.lora) continue;
        const size_t q = common_prefix(slot->task->prompt, task.prompt);
        if (2 * q >= task.prompt.size() && q >= std::max(best, kept) + 16) donor.wait = true;
    }
    return donor;
}

void Scheduler::drop_cancelled() {
    for (auto & slot : slots_) {
        if (slot->busy() && slot->task->channel->cancelled()) {
            SRV_INF("slot %d: task %llu cancelled (client gone) after %d tokens", slot->id,
                    (unsigned long long) slot->task->id, slot->n_decoded);
            slot->release();
            busy_--;
            tasks_done_++;
        }
    }
}

// llama-server's context shift: keep the first n_keep tokens (the whole
// prompt for -1, plus BOS), drop n_discard after them (half of the rest by
// default, always leaving one), and move what follows back; the engine
// rotates the moved keys.
void Scheduler::shift_context(Slot & slot) {
    const Task & task = *slot.task;
    const int32_t n_past = (int32_t) slot.kv_tokens.size();
    int32_t n_keep = task.n_keep < 0 ? (int32_t) task.prompt.size() : task.n_keep;
    if (engine_.tokenizer().add_bos()) n_keep += 1;
    n_keep = std::max(0, std::min(n_ctx_slot_ - 4, n_keep));
    const int32_t n_left = n_past - n_keep;
    const int32_t n_discard = std::clamp(task.n_discard ? task.n_discard : n_left / 2, 0, std::max(0, n_left - 1));
    SRV_WRN("slot %d: context shift, n_keep = %d, n_left = %d, n_discard = %d", slot.id, n_keep, n_left, n_discard);
    engine_.seq_remove(slot.id, n_keep, n_keep + n_discard);
    engine_.seq_shift(slot.id, n_keep + n_discard, n_past, -n_discard);
    slot.kv_tokens.erase(slot.kv_tokens.begin() + n_keep, slot.kv_tokens.begin() + n_keep + n_discard);
    slot.truncated = true;
}

// With one pool of cells for every slot (-kvu) a slot may grow past its
// share, so a step takes at most the free cells. When they are fewer than
// the step wants, the idle slots' caches go first (into the prompt cache
// where it is on), as llama-server's do; with none left, the busy slot
// holding the most cells fails and frees them, so that the others go on.
int32_t Scheduler::cells_for_step() {
    if (!engine_.options().kv_unified) return n_batch_;
    int64_t wanted = 0;
    for (const auto & slot : slots_) {
        if (slot->state == Slot::State::Generating) wanted += 1;
        if (slot->state == Slot::State::Prompt) wanted += (int64_t) (slot->task->prompt.size() - slot->n_prompt_done);
    }
    if (engine_.n_free_cells() < std::min<int64_t>(wanted, n_batch_)) {
        for (auto & slot : slots_) {
            if (slot->busy() || slot->kv_tokens.empty()) continue;
            if (prompt_cache_.enabled() && !prompt_cache_.covers(slot->kv_tokens, slot->kv_lora)) {
                keep_in_prompt_cache(*slot);
            }
            slot->clear_cache(engine_);
        }
    }
    while (wanted > 0 && engine_.n_free_cells() == 0) {
        Slot * largest = nullptr;
        for (auto & slot : slots_) {
            if (slot->busy() && (!largest || slot->kv_tokens.size() > largest->kv_tokens.size())) largest = slot.get();
        }
        if (largest == nullptr || largest->kv_tokens.empty()) break;
        const std::string held = std::to_string(largest->kv_tokens.size());
        SRV_WRN("slot %d: the shared KV cache is full; its request, holding the most cells (%s), fails", largest->id,
                held.c_str());
        fail(*largest, 500,
             "context size exceeded: the KV cache the slots share (-kvu) is full, and this request held the most "
             "of its cells (" +
                 held + ")");
        largest->clear_cache(engine_);
    }
    return std::min(n_batch_, engine_.n_free_cells());
}

void Scheduler::build_batch() {
    batch_.clear();
    int32_t budget = cells_for_step();
    step_prompt_tokens_ = 0;

    // One token for every generating slot first: generation never stalls
    // behind a long prompt. Then the tokens drafted to follow it.
    std::vector<Slot *> generating;
    for (auto & slot : slots_) {
        slot->logits_row = -1;
        slot->first_row = -1;
        slot->draft.clear();
        slot->draft_by = -1;
        const int32_t n = 1 + (int32_t) slot->replay.size();
        if (slot->state != Slot::State::Generating || budget < n) {
            continue;
        }
        if (slot->task->context_shift && slot->n_past() + 1 >= n_ctx_slot_) shift_context(*slot);
        generating.push_back(slot.get());
        budget -= n;
    }
    propose_drafts(generating, budget);
    for (Slot * slot : generating) {
        auto add = [&](int32_t token, bool output) {
            batch_.add(token, slot->n_past(), slot->id, output);
            batch_.lora.insert(batch_.lora.end(), slot->task->lora.begin(), slot->task->lora.end());
            slot->inflight.push_back(token);
        };
        // A draft is checked from the state it starts at, which a recurrent
        // model keeps to go back to (Scheduler::sample).
        if (!slot->draft.empty() && !engine_.can_rewind()) engine_.seq_save_state(slot->id);
        for (const int32_t token : slot->replay) add(token, false);
        slot->replay.clear();
        slot->logits_row = batch_.size();
        add(slot->pending, true);
        for (const int32_t token : slot->draft) add(token, true);
    }

    // Then prompt chunks, starting with a different slot each step.
    const size_t n = slots_.size();
    for (size_t k = 0; k < n && budget > 0; k++) {
        Slot & slot = *slots_[(prompt_rr_ + k) % n];
        if (slot.state != Slot::State::Prompt) {
            continue;
        }
        const auto & prompt = slot.task->prompt;
        const bool embedding = slot.task->embedding;
        // A chunk ends where a context checkpoint is to be taken.
        const size_t take =
            std::min({prompt.size() - slot.n_prompt_done, (size_t) budget, next_checkpoint(slot) - slot.n_prompt_done});
        if (embedding && take > 0) slot.first_row = batch_.size();
        for (size_t i = 0; i < take; i++) {
            const int32_t tok = prompt[slot.n_prompt_done];
            const bool last = slot.n_prompt_done + 1 == prompt.size();
            if (last && !embedding) {
                slot.logits_row = batch_.size();
            }
            batch_.add(tok, slot.n_past(), slot.id, last || embedding);
            batch_.lora.insert(batch_.lora.end(), slot.task->lora.begin(), slot.task->lora.end());
            slot.inflight.push_back(tok);
            slot.n_prompt_done++;
            slot.prompt_in_step = true;
        }
        budget -= (int32_t) take;
        step_prompt_tokens_ += (int32_t) take;
    }
    prompt_rr_ = (prompt_rr_ + 1) % std::max<size_t>(1, n);
}

// Speculative decoding: each generating slot gets what the first drafter
// with a proposal for it proposes, within the batch's budget, its context
// (the sampled token, the drafts and one more position must fit) and the
// tokens it may still generate.
void Scheduler::propose_drafts(const std::vector<Slot *> & generating, int32_t & budget) {
    if (drafters_.empty()) return;
    int32_t most = 0;  // that any drafter proposes
    for (const auto & d : drafters_) most = std::max(most, d->n_max());
    std::vector<DraftRequest> requests;
    requests.reserve(generating.size());
    int32_t room_left = budget;
    for (Slot * slot : generating) {
        // Decoding again what a rejected draft took back comes first: a draft
        // then would be checked from a state saved before those tokens.
        if (!slot->replay.empty()) continue;
        const Task & task = *slot->task;
        const int32_t room =
            std::min({most, room_left, n_ctx_slot_ - slot->n_past() - 2, task.n_predict - slot->n_decoded - 1});
        if (room <= 0) continue;
        DraftRequest r;
        r.seq = slot->id;
        r.cached = &slot->kv_tokens;
        r.last = slot->pending;
        r.n_max = room;
        requests.push_back(std::move(r));
        room_left -= room;
    }
    std::vector<DraftRequest *> open;
    for (DraftRequest & r : requests) open.push_back(&r);
    for (size_t i = 0; i < drafters_.size() && !open.empty(); ++i) {
        drafters_[i]->draft(open);
        for (DraftRequest * r : open) {
            if (!r->tokens.empty()) r->by = (int32_t) i;
        }
        open.erase(std::remove_if(open.begin(), open.end(), [](const DraftRequest * r) { return !r->tokens.empty(); }),
                   open.end());
    }
    for (DraftRequest & r : requests) {
        if ((int32_t) r.tokens.size() > r.n_max) r.tokens.resize(r.n_max);
        budget -= (int32_t) r.tokens.size();
        slots_[r.seq]->draft = std::move(r.tokens);
        slots_[r.seq]->draft_by = r.by;
    }
}

// No step can run again: every task gets 503 now, and so will later ones.
void Scheduler::fail_group(const std::string & why) {
    const std::string message = "the rank group failed: " + why;
    for (auto & slot : slots_) {
        if (slot->busy()) fail(*slot, 503, message);
    }
    std::deque<std::unique_ptr<Task>> queued;
    bool first = false;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        first = group_failure_.empty();
        if (first) group_failure_ = why;
        queued.swap(queue_);
    }
    for (auto & t : queued) t->channel->push(error_event(503, message));
    if (first && on_group_failed_) on_group_failed_(why);
}

}  // namespace llama_tp::server
