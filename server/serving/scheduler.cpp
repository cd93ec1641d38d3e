#include "server/serving/scheduler.h"

#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "server/log.h"
#include "server/serving/token_prefix.h"

#include "reasoning-budget.h"

#include <algorithm>

namespace llama_tp::server {

namespace {

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

TaskEvent error_event(int status, const std::string & message) {
    TaskEvent e;
    e.kind = TaskEvent::Kind::Error;
    e.status = status;
    e.message = message;
    return e;
}

}  // namespace

Scheduler::Scheduler(Engine & engine, int32_t n_slots, int32_t n_ctx_slot, int32_t n_batch, int32_t max_queue,
                     Metrics * metrics, SlotReuse reuse)
    : engine_(engine),
      n_ctx_slot_(n_ctx_slot),
      n_batch_(std::max<int32_t>(1, n_batch)),
      max_queue_(std::max<int32_t>(0, max_queue)),
      metrics_(metrics),
      prompt_similarity_(reuse.prompt_similarity),
      prompt_cache_(reuse.prompt_cache_bytes,
                    [&engine](size_t n, size_t m) { return engine.image_resumable((int32_t) n, (int32_t) m); }),
      // A slot's image resuming anywhere (no window pool, or a window as long
      // as the slot) needs no checkpoints.
      ctx_checkpoints_(prompt_cache_.enabled() && !engine.image_resumable(n_ctx_slot, 1)
                           ? std::max<int32_t>(0, reuse.ctx_checkpoints)
                           : 0) {
    for (int32_t i = 0; i < n_slots; i++) {
        slots_.push_back(std::make_unique<Slot>(i));
    }
    publish_views();
}

Scheduler::~Scheduler() {
    shutdown();
}

void Scheduler::start() {
    thread_ = std::thread([this] { run(); });
}

bool Scheduler::stop_within(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mutex_);
    stopping_ = true;
    cv_.notify_all();
    return !thread_.joinable() || cv_.wait_for(lock, wait, [&] { return finished_; });
}

void Scheduler::shutdown() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
    // Whatever is left (the thread never ran, or tasks raced in) fails now.
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto & t : queue_) {
        t->channel->push(error_event(503, "the server is shutting down"));
    }
    queue_.clear();
}

std::shared_ptr<TaskChannel> Scheduler::submit(std::unique_ptr<Task> task) {
    auto channel = task->channel;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) {
            channel->push(error_event(503, "the server is shutting down"));
            return channel;
        }
        if (!group_failure_.empty()) {
            channel->push(error_event(503, "the rank group failed: " + group_failure_));
            return channel;
        }
        // Queued tasks that idle slots will take at the next step do not wait.
        const int32_t idle = n_slots() - busy_;
        if ((int32_t) queue_.size() >= max_queue_ + std::max(0, idle)) {
            throw QueueFullError("all " + std::to_string(n_slots()) + " slots are busy and " +
                                 std::to_string(queue_.size()) + " requests are waiting; retry later");
        }
        queue_.push_back(std::move(task));
    }
    cv_.notify_all();
    return channel;
}

Scheduler::Stats Scheduler::stats() const {
    Stats s;
    s.busy = busy_;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        s.queued = (int32_t) queue_.size();
    }
    s.tasks_done = tasks_done_;
    s.steps = steps_;
    return s;
}

std::vector<Scheduler::SlotView> Scheduler::slot_views() const {
    std::lock_guard<std::mutex> lock(views_mutex_);
    return views_;
}

void Scheduler::publish_views() {
    std::vector<SlotView> views;
    for (const auto & slot : slots_) {
        SlotView v;
        v.id = slot->id;
        v.busy = slot->busy();
        const Slot::TaskSummary task = slot->task ? Slot::TaskSummary::of(*slot->task) : slot->last_task;
        if (task.id != 0) {
            v.task_id = task.id;
            v.n_prompt = task.n_prompt;
            v.n_predict = task.n_predict;
            v.settings = task.settings;
            v.n_prompt_cached = slot->n_cached;
            v.n_prompt_processed = std::max(0, (int32_t) slot->n_prompt_done - slot->n_cached);
            v.n_decoded = slot->n_decoded;
            v.has_new_line = slot->has_new_line;
        }
        v.n_cached_tokens = (int32_t) slot->kv_tokens.size();
        views.push_back(v);
    }
    std::lock_guard<std::mutex> lock(views_mutex_);
    views_ = std::move(views);
}

void Scheduler::run() {
    bool had_work = false;
    while (true) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            if (had_work && queue_.empty() && busy_ == 0 && !stopping_ && on_idle_) {
                lock.unlock();
                on_idle_();
                lock.lock();
            }
            had_work = false;
            auto has_work = [&] { return stopping_ || !queue_.empty() || busy_ > 0 || !actions_.empty(); };
            if (sleep_after_.count() > 0 && !asleep_) {
                if (!cv_.wait_for(lock, sleep_after_, has_work)) {
                    lock.unlock();
                    fall_asleep();
                    continue;
                }
            } else {
                cv_.wait(lock, has_work);
            }
            if (stopping_) {
                break;
            }
        }
        if (asleep_ && !wake_up()) continue;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (stopping_) break;  // asked while the model loaded
        }
        run_slot_actions();
        admit();
        drop_cancelled();
        build_batch();
        had_work = true;
        if (batch_.size() > 0) {
            const auto t0 = std::chrono::steady_clock::now();
            step_sampled_ = 0;
            decode_and_sample();
            steps_++;
            if (metrics_ != nullptr) {
                metrics_->count_step(step_prompt_tokens_, step_sampled_, busy_,
                                     ms_between(t0, std::chrono::steady_clock::now()));
            }
        }
        publish_views();
    }
    for (auto & slot : slots_) {
        if (slot->busy()) {
            fail(*slot, 503, "the server is shutting down");
        }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (PendingAction & p : actions_) {
        p.action.status = 503;
        p.action.message = "the server is shutting down";
        p.done.set_value(std::move(p.action));
    }
    actions_.clear();
    finished_ = true;
    cv_.notify_all();
}

// Every slot is idle: the model and the caches go; slots keep no tokens.
void Scheduler::fall_asleep() {
    for (const auto & d : drafters_) d->sleep();
    try {
        engine_.sleep();
    } catch (const std::exception & e) {
        SRV_WRN("cannot sleep: %s", e.what());
        sleep_after_ = std::chrono::seconds(0);
        return;
    }
    for (auto & slot : slots_) {
        slot->kv_tokens.clear();
        slot->kv_lora.clear();
    }
    prompt_cache_.clear();
    asleep_ = true;
    SRV_INF("sleeping after %lld s without requests: the model is unloaded until the next one",
            (long long) sleep_after_.count());
    if (on_idle_) on_idle_();
    publish_views();
}

bool Scheduler::wake_up() {
    const auto t0 = std::chrono::steady_clock::now();
    try {
        engine_.wake();
    } catch (const std::exception & e) {
        const std::string message = std::string("the model could not be loaded again: ") + e.what();
        SRV_ERR("%s", message.c_str());
        std::deque<std::unique_ptr<Task>> queued;
        std::deque<PendingAction> actions;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            queued.swap(queue_);
            actions.swap(actions_);
        }
        for (auto & t : queued) t->channel->push(error_event(500, message));
        for (PendingAction & p : actions) {
            p.action.status = 500;
            p.action.message = message;
            p.done.set_value(std::move(p.action));
        }
        return false;
    }
    for (const auto & d : drafters_) d->wake();
    asleep_ = false;
    SRV_INF("awake: the model is loaded again (%.0f ms)", ms_between(t0, std::chrono::steady_clock::now()));
    return true;
}

std::future<Scheduler::SlotAction> Scheduler::slot_action(SlotAction action) {
    PendingAction p{std::move(action), {}};
    std::future<SlotAction> f = p.done.get_future();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_ || finished_) {
            p.action.status = 503;
            p.action.message = "the server is shutting down";
            p.done.set_value(std::move(p.action));
            return f;
        }
        actions_.push_back(std::move(p));
    }
    cv_.notify_all();
    return f;
}

void Scheduler::run_slot_actions() {
    std::deque<PendingAction> todo;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        todo.swap(actions_);
    }
    for (PendingAction & p : todo) {
        try {
            apply(p.action);
        } catch (const std::exception & e) {
            p.action.status = 500;
            p.action.message = e.what();
        }
        p.done.set_value(std::move(p.action));
    }
}

void Scheduler::apply(SlotAction & a) {
    if (a.kind == SlotAction::Kind::EndReasoning) {
        end_reasoning(a);
        return;
    }
    if (a.slot < 0 || a.slot >= n_slots()) {
        a.status = 400;
        a.message = "no slot " + std::to_string(a.slot) + " (slots 0 to " + std::to_string(n_slots() - 1) + ")";
        return;
    }
    Slot & slot = *slots_[a.slot];
    if (slot.busy()) {
        a.status = 503;
        a.message = "slot " + std::to_string(a.slot) + " is busy";
        return;
    }
    switch (a.kind) {
        case SlotAction::Kind::Save:
            a.tokens = slot.kv_tokens;
            try {
                a.kv = engine_.read_sequence(slot.id, (int32_t) a.tokens.size());
            } catch (const Error & e) {
                a.status = 500;
                a.message = e.what();
            }
            return;
        case SlotAction::Kind::Restore:
            if ((int32_t) a.tokens.size() >= n_ctx_slot_) {
                a.status = 400;
                a.message = "the saved slot holds " + std::to_string(a.tokens.size()) +
                            " tokens; a slot here holds fewer than " + std::to_string(n_ctx_slot_);
                return;
            }
            try {
                engine_.write_sequence(slot.id, a.tokens, a.kv);
            } catch (const Error & e) {
                // An image refused as it is leaves the slot's cells; one that
                // did not fit leaves none.
                if (engine_.seq_pos_max(slot.id) < 0) slot.kv_tokens.clear();
                a.status = 400;
                a.message = e.what();
                return;
            }
            slot.kv_tokens = a.tokens;
            slot.kv_lora = a.lora;
            return;
        case SlotAction::Kind::Erase:
            a.tokens = slot.kv_tokens;
            slot.clear_cache(engine_);
            return;
        case SlotAction::Kind::EndReasoning:
            return;
    }
}

// The reasoning budget of the running task forces the end of its thinking
// from its next token on (all its choices: they share the response's id).
// Ending thinking that is not open (done, or not begun) changes nothing.
void Scheduler::end_reasoning(SlotAction & a) {
    bool found = false;
    for (auto & slot : slots_) {
        if (!slot->busy() || slot->task->completion_id != a.completion_id) continue;
        found = true;
        if (!slot->task->reasoning_control) {
            a.status = 409;
            a.message = "reasoning control not enabled for this completion";
            return;
        }
        common_reasoning_budget_force(slot->task->sampler->constraint());
    }
    if (!found) {
        a.status = 404;
        a.message = "no active completion for this id";
    }
}

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

size_t Scheduler::next_checkpoint(const Slot & slot) const {
    if (ctx_checkpoints_ == 0 || slot.state != Slot::State::Prompt) return SIZE_MAX;
    const Task & task = *slot.task;
    // A request that keeps nothing of its cache has no later prompt to serve.
    if (task.embedding || !task.cache_prompt || task.prompt.size() <= kCheckpointTail) return SIZE_MAX;
    const size_t at = task.prompt.size() - kCheckpointTail;
    return at > slot.n_prompt_done ? at : SIZE_MAX;
}

void Scheduler::checkpoint(Slot & slot) {
    const size_t n = slot.kv_tokens.size();
    if (!slot.task->cache_prompt || n + kCheckpointTail != slot.task->prompt.size()) return;
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
        if (slot->state != Slot::State::Generating || budget == 0) {
            continue;
        }
        if (slot->task->context_shift && slot->n_past() + 1 >= n_ctx_slot_) shift_context(*slot);
        generating.push_back(slot.get());
        budget--;
    }
    propose_drafts(generating, budget);
    for (Slot * slot : generating) {
        auto add = [&](int32_t token) {
            batch_.add(token, slot->n_past(), slot->id, true);
            batch_.lora.insert(batch_.lora.end(), slot->task->lora.begin(), slot->task->lora.end());
            slot->inflight.push_back(token);
        };
        slot->logits_row = batch_.size();
        add(slot->pending);
        for (const int32_t token : slot->draft) add(token);
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

void Scheduler::decode_and_sample() {
    try {
        engine_.decode(batch_);
    } catch (const std::exception & e) {
        SRV_ERR("decode of %d tokens failed: %s", batch_.size(), e.what());
        const std::string broken = engine_.failure();
        for (auto & slot : slots_) {
            if (!slot->inflight.empty()) {
                slot->clear_cache(engine_);
                if (slot->busy()) {
                    if (broken.empty()) fail(*slot, 500, std::string("decode failed: ") + e.what());
                }
            }
        }
        if (!broken.empty()) fail_group(broken);
        return;
    }
    for (auto & slot : slots_) {
        slot->commit();
        if (slot->prompt_in_step && slot->busy()) {
            if (slot->task->return_progress) report_progress(*slot);
            if (ctx_checkpoints_ > 0 && slot->state == Slot::State::Prompt && !slot->task->embedding) {
                checkpoint(*slot);
            }
        }
        slot->prompt_in_step = false;
    }
    for (auto & slot : slots_) {
        if (slot->busy() && slot->first_row >= 0) {
            try {
                pool(*slot);
            } catch (const std::exception & e) {
                fail(*slot, 500, std::string("embedding failed: ") + e.what());
            }
            continue;
        }
        if (slot->busy() && slot->logits_row >= 0) {
            try {
                sample(*slot);
            } catch (const std::exception & e) {
                fail(*slot, 500, std::string("sampling failed: ") + e.what());
            }
        }
    }
}

// An embedding task's hidden states of this step's prompt tokens, pooled
// into the slot; the task ends with the prompt.
void Scheduler::pool(Slot & slot) {
    Task & task = *slot.task;
    const int32_t n_embd = engine_.info().n_embd;
    const int32_t n_rows = batch_.size() - slot.first_row;
    int32_t n_mine = 0;
    while (n_mine < n_rows && batch_.seq[slot.first_row + n_mine] == slot.id) n_mine++;
    const int32_t p0 = batch_.pos[slot.first_row];
    for (int32_t i = 0; i < n_mine; ++i) {
        const float * h = engine_.embedding(slot.first_row + i);
        const int32_t pos = p0 + i;
        const bool last = pos + 1 == (int32_t) task.prompt.size();
        switch (task.pooling) {
            case Pooling::None:
                slot.hidden.insert(slot.hidden.end(), h, h + n_embd);
                break;
            case Pooling::Mean:
                if (slot.hidden.empty()) slot.hidden.assign(n_embd, 0.0f);
                for (int32_t c = 0; c < n_embd; ++c) slot.hidden[c] += h[c];
                break;
            case Pooling::Cls:
                if (pos == 0) slot.hidden.assign(h, h + n_embd);
                break;
            case Pooling::Last:
                if (last) slot.hidden.assign(h, h + n_embd);
                break;
            case Pooling::Rank:
                if (engine_.classifier()->last_token ? last : pos == 0) slot.hidden.assign(h, h + n_embd);
                break;
        }
    }
    if (slot.n_prompt_done < task.prompt.size()) return;
    if (task.pooling == Pooling::Mean) {
        for (float & v : slot.hidden) v /= (float) task.prompt.size();
    }
    if (task.pooling == Pooling::Rank) slot.hidden = engine_.classifier()->apply(slot.hidden.data());
    TaskEvent done;
    done.kind = TaskEvent::Kind::Done;
    done.finish_reason = "stop";
    done.id_slot = slot.id;
    done.n_prompt = (int32_t) task.prompt.size();
    done.embedding_rows = task.pooling == Pooling::None ? done.n_prompt : 1;
    done.embedding = std::move(slot.hidden);
    task.channel->push(std::move(done));
    slot.release();
    busy_--;
    tasks_done_++;
}

// t_max_predict_ms: the time since the first token is up, and a line is complete.
bool Scheduler::over_time(const Slot & slot, std::chrono::steady_clock::time_point now) const {
    const int32_t limit = slot.task->t_max_predict_ms;
    return limit > 0 && slot.has_new_line && ms_between(slot.t_first_token, now) > limit;
}

void Scheduler::report_progress(Slot & slot) {
    TaskEvent ev;
    ev.kind = TaskEvent::Kind::Progress;
    ev.id_slot = slot.id;
    ev.n_prompt = (int32_t) slot.task->prompt.size();
    ev.n_cached = slot.n_cached;
    ev.n_processed = (int32_t) slot.n_prompt_done;
    ev.timings.prompt_n = (int32_t) slot.n_prompt_done - slot.n_cached;
    ev.timings.prompt_ms = ms_between(slot.t_start, std::chrono::steady_clock::now());
    slot.task->channel->push(std::move(ev));
}

// Samples from the slot's first logits row and, while the sampled token is
// the one drafted to come next, from the next row too: every token is
// sampled from the target's own logits, so drafts change the speed, never
// the distribution. The cells of drafts that were not confirmed are dropped.
void Scheduler::sample(Slot & slot) {
    Task & task = *slot.task;
    const auto now = std::chrono::steady_clock::now();
    if (slot.state == Slot::State::Prompt) {
        slot.t_first_token = now;
        slot.state = Slot::State::Generating;
        for (const auto & d : drafters_) d->begin(slot.id, slot.kv_tokens);
    }
    if (slot.n_decoded >= task.n_predict) {
        finish(slot, StopKind::Limit);
        return;
    }
    const std::vector<int32_t> draft = std::move(slot.draft);
    slot.draft.clear();
    // The slot's cache holds the sampled token's input and every draft now.
    const int32_t n_before = (int32_t) slot.kv_tokens.size() - (int32_t) draft.size();
    size_t n_accepted = 0;
    std::optional<StopKind> stop;
    int32_t token = -1;
    for (size_t i = 0;; ++i) {
        token = sample_token(slot, slot.logits_row + (int32_t) i, now);
        const bool confirmed = i < draft.size() && token == draft[i];
        if (confirmed) n_accepted++;
        stop = stop_after(slot, token, n_before + (int32_t) i, now);
        if (stop || !confirmed) break;
    }
    if (!draft.empty()) {
        const int32_t keep = n_before + (int32_t) n_accepted;
        engine_.seq_remove(slot.id, keep, -1);
        slot.kv_tokens.resize(keep);
        slot.n_drafted += (int32_t) draft.size();
        slot.n_draft_accepted += (int32_t) n_accepted;
        if (metrics_ != nullptr) metrics_->count_drafts((int32_t) draft.size(), (int32_t) n_accepted);
        if (slot.draft_by >= 0) drafters_[slot.draft_by]->accept(slot.id, (int32_t) n_accepted);
    }
    if (stop) {
        finish(slot, *stop);
    } else {
        slot.pending = token;
    }
}

// One token from one row of logits, sent to the client.
int32_t Scheduler::sample_token(Slot & slot, int32_t row, std::chrono::steady_clock::time_point now) {
    Task & task = *slot.task;
    const Tokenizer & tok = engine_.tokenizer();
    const float * logits = engine_.logits(row);
    const int32_t token = task.sampler->sample(logits);
    const bool as_text =
        task.special_as_text || std::binary_search(task.preserved_tokens.begin(), task.preserved_tokens.end(), token);
    slot.n_decoded++;
    step_sampled_++;

    TaskEvent ev;
    if (task.n_top_logprobs >= 0) {
        TokenLogprob lp;
        lp.token = token;
        lp.piece = tok.piece(token, as_text);
        lp.logprob = task.sampler->logprob(logits, token);
        if (task.n_top_logprobs > 0) {
            lp.top = task.sampler->top_logprobs(logits, task.n_top_logprobs);
        }
        ev.logprobs.push_back(std::move(lp));
    }

    const bool eog = tok.is_eog(token) && !task.ignore_eos;
    // An end-of-generation token shown as text ends the text, as llama-server's --special.
    if (!eog || as_text) {
        ev.text = slot.stream.push(tok.piece(token, as_text));
    }
    if (task.return_tokens) ev.tokens.push_back(token);
    slot.has_new_line |= ev.text.find('\n') != std::string::npos;
    if (task.timings_per_token) {
        ev.has_timings = true;
        ev.timings.prompt_n = (int32_t) task.prompt.size() - slot.n_cached;
        ev.timings.prompt_ms = ms_between(slot.t_start, slot.t_first_token);
        ev.timings.predicted_n = slot.n_decoded;
        ev.timings.predicted_ms = ms_between(slot.t_first_token, now);
        ev.timings.draft_n = slot.n_drafted;
        ev.timings.draft_n_accepted = slot.n_draft_accepted;
    }
    ev.id_slot = slot.id;
    ev.n_prompt = (int32_t) task.prompt.size();
    ev.n_completion = slot.n_decoded;
    if (!ev.text.empty() || !ev.logprobs.empty() || !ev.tokens.empty()) {
        task.channel->push(std::move(ev));
    }
    return token;
}

// Whether generation ends with `token`, sampled from the logits of the last
// of the n_past positions the slot's cache holds.
std::optional<Scheduler::StopKind> Scheduler::stop_after(const Slot & slot, int32_t token, int32_t n_past,
                                                         std::chrono::steady_clock::time_point now) const {
    const Task & task = *slot.task;
    if (engine_.tokenizer().is_eog(token) && !task.ignore_eos) return StopKind::Eos;
    if (slot.stream.stopped()) return StopKind::Word;
    if (slot.n_decoded >= task.n_predict || (!task.context_shift && n_past >= n_ctx_slot_) || over_time(slot, now)) {
        return StopKind::Limit;
    }
    return std::nullopt;
}

void Scheduler::finish(Slot & slot, StopKind kind) {
    const char * reason = kind == StopKind::Limit ? "length" : "stop";
    Task & task = *slot.task;
    const std::string rest = slot.stream.flush();
    if (!rest.empty()) {
        TaskEvent text;
        text.text = rest;
        task.channel->push(std::move(text));
    }
    const auto now = std::chrono::steady_clock::now();
    TaskEvent done;
    done.kind = TaskEvent::Kind::Done;
    done.finish_reason = reason;
    done.stop_type = kind == StopKind::Eos ? "eos" : kind == StopKind::Word ? "word" : "limit";
    // llama-server's truncated: a context shift dropped tokens, or the
    // context (which capped n_predict) ended generation.
    done.truncated =
        slot.truncated || (kind == StopKind::Limit && task.context_ends_it && slot.n_decoded >= task.n_predict);
    if (kind == StopKind::Word) done.stopping_word = slot.stream.stop_word();
    done.id_slot = slot.id;
    done.n_prompt = (int32_t) task.prompt.size();
    done.n_cached = slot.n_cached;
    done.n_completion = slot.n_decoded;
    done.timings.prompt_n = (int32_t) task.prompt.size() - slot.n_cached;
    done.timings.prompt_ms = ms_between(slot.t_start, slot.t_first_token);
    done.timings.predicted_n = slot.n_decoded;
    done.timings.predicted_ms = ms_between(slot.t_first_token, now);
    done.timings.draft_n = slot.n_drafted;
    done.timings.draft_n_accepted = slot.n_draft_accepted;
    SRV_INF(
        "slot %d: task %llu done: prompt %d (%d cached), generated %d, %s, queued %.1f ms, prompt %.1f ms, "
        "gen %.1f ms",
        slot.id, (unsigned long long) task.id, done.n_prompt, done.n_cached, done.n_completion, reason,
        ms_between(task.t_submit, slot.t_start), done.timings.prompt_ms, done.timings.predicted_ms);
    if (metrics_ != nullptr) metrics_->count_finished(done.n_cached, done.n_prompt + done.n_completion);
    task.channel->push(std::move(done));
    slot.release();
    busy_--;
    tasks_done_++;
}

void Scheduler::fail(Slot & slot, int status, const std::string & message) {
    slot.task->channel->push(error_event(status, message));
    slot.release();
    busy_--;
    tasks_done_++;
}

}  // namespace llama_tp::server
