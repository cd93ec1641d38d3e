// The scheduler's life: start, the loop of steps, sleep and wake, and the
// slot actions (save, restore, erase, reasoning end) it runs between steps.
#include "server/serving/scheduler/scheduler.h"

#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "server/log.h"
#include "server/serving/scheduler/task_events.h"
#include "server/serving/cache/token_prefix.h"

#include "reasoning-budget.h"

#include <algorithm>

namespace llama_tp::server {

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
                           : 0),
      checkpoint_min_step_(std::max<int32_t>(0, reuse.checkpoint_min_step)) {
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
                // A group of processes may fail while it idles (a process
                // stopped between requests): its heartbeat says so, asked
                // once a second.
                while (!cv_.wait_for(lock, std::chrono::seconds(1), has_work)) {
                    if (!group_failure_.empty()) continue;
                    lock.unlock();
                    const std::string broken = engine_.failure();
                    if (!broken.empty()) fail_group(broken);
                    lock.lock();
                }
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
        slot->checkpoint_at = 0;
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
            slot.checkpoint_at = 0;
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

}  // namespace llama_tp::server
