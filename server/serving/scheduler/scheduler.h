#pragma once
// Continuous batching. One thread owns the Engine. Each step it gathers the
// next token of every generating slot plus chunks of pending prompts into one
// Batch (at most n_batch tokens), decodes it, and samples for every slot whose
// logits came back. Tasks wait in a FIFO queue while all slots are busy.

#include "runtime/batch.h"
#include "runtime/engine.h"
#include "server/speculative/drafter.h"
#include "server/http/metrics.h"
#include "server/serving/cache/prompt_cache.h"
#include "server/serving/slot.h"
#include "server/serving/task.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

namespace llama_tp::server {

// All slots are busy and the wait queue is at its limit.
class QueueFullError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// How a task finds cached prompt tokens, as llama-server's -sps and --cache-ram.
struct SlotReuse {
    // A task takes the idle slot sharing the longest prefix with its prompt
    // when that is more than this part of the prompt, else the least
    // recently used one (0: always the least recently used).
    float prompt_similarity = 0.1f;
    int64_t prompt_cache_bytes = 0;  // PromptCache's limit (< 0: none, 0: no cache)
    // llama-server's context checkpoints (--ctx-checkpoints), where
    // sliding-window layers keep only their window or linear attention a
    // state: a prompt's cells are kept in the prompt cache 4 tokens before
    // its end and where user messages open, at most this many per slot, so
    // that a later prompt diverging after that point resumes there (0: none).
    int32_t ctx_checkpoints = 0;
    // Of the user messages before the last, only one opening more than this
    // many tokens past the slot's newest checkpoint gets one (--checkpoint-min-step).
    int32_t checkpoint_min_step = 8192;
};

class Scheduler {
  public:
    // n_ctx_slot: positions each slot may use (prompt + generated); max_queue:
    // most tasks that may wait for a slot; metrics: may be null.
    Scheduler(Engine & engine, int32_t n_slots, int32_t n_ctx_slot, int32_t n_batch, int32_t max_queue,
              Metrics * metrics, SlotReuse reuse = {});
    ~Scheduler();

    // Called on the scheduler thread whenever the last task finishes and no
    // other waits (set before start()).
    void set_on_idle(std::function<void()> fn) { on_idle_ = std::move(fn); }
    // Called once, on the scheduler thread, when the engine's rank group
    // fails for good (set before start()). Running and queued tasks, and
    // every later one, get 503 with the reason.
    void set_on_group_failed(std::function<void(const std::string &)> fn) { on_group_failed_ = std::move(fn); }

    // Speculative decoding: the drafters asked in turn for tokens to check
    // after each generating slot's sampled token (set before start()).
    void set_drafters(std::vector<std::unique_ptr<Drafter>> drafters) { drafters_ = std::move(drafters); }
    // llama-server's --sleep-idle-seconds: after this long without a task the
    // engine (and a draft model) frees the model and every cache; the next
    // task or slot action loads it again (set before start(); 0: never).
    void set_sleep_after(std::chrono::seconds idle) { sleep_after_ = idle; }
    bool asleep() const { return asleep_; }

    void start();
    // Asks the thread to stop after its current step, and waits up to
    // `wait` for it to end; false when it is still inside that step (a
    // decode waiting on a rank that does not answer).
    bool stop_within(std::chrono::milliseconds wait);
    // Fails queued and running tasks with 503 and joins the thread; later
    // submissions fail at once.
    void shutdown();

    // Queues a task; its events arrive on the returned channel. Throws
    // QueueFullError when it would have to wait behind max_queue others.
    std::shared_ptr<TaskChannel> submit(std::unique_ptr<Task> task);

    int32_t n_slots() const { return (int32_t) slots_.size(); }
    int32_t n_ctx_slot() const { return n_ctx_slot_; }

    struct Stats {
        int32_t busy = 0;
        int32_t queued = 0;
        uint64_t tasks_done = 0;
        uint64_t steps = 0;
    };
    Stats stats() const;

    // What /slots shows of a slot, as of the end of the last step.
    struct SlotView {
        int32_t id = 0;
        bool busy = false;
        // The running task's, else the last one's (task_id 0: none yet).
        uint64_t task_id = 0;
        int32_t n_prompt = 0;
        int32_t n_prompt_processed = 0;  // prompt tokens computed
        int32_t n_prompt_cached = 0;     // prompt tokens taken from a cache
        int32_t n_decoded = 0;
        int32_t n_predict = 0;
        bool has_new_line = false;
        std::shared_ptr<const std::string> settings;  // its generation settings, as JSON text (may be null)
        int32_t n_cached_tokens = 0;                  // tokens the slot's KV cells hold
    };
    std::vector<SlotView> slot_views() const;

    // Save, restore or erase one idle slot's cache, between decode steps on
    // the scheduler thread (the caller does the file I/O). Save fills tokens
    // and kv; Restore takes them. EndReasoning ends the thinking of the
    // running task whose response has completion_id (reasoning_control).
    // The future's status is 0 on success, else an HTTP status with message.
    struct SlotAction {
        enum class Kind { Save, Restore, Erase, EndReasoning } kind = Kind::Save;
        int32_t slot = 0;
        std::string completion_id;
        std::vector<int32_t> tokens;
        std::vector<uint8_t> kv;
        std::vector<float> lora;  // Restore: the LoRA scales the cells are taken to have
        int status = 0;
        std::string message;
    };
    std::future<SlotAction> slot_action(SlotAction action);

  private:
    void run();
    void fall_asleep();
    bool wake_up();                               // false: the model could not be loaded; what waited got 500
    void admit();                                 // queued tasks -> idle slots
    Slot * choose_slot(const Task & task) const;  // null: the task's own slot is busy
    struct Admission {
        std::unique_ptr<Task> task;
        Slot * slot = nullptr;
        const Slot * donor = nullptr;  // Slot::begin's
        size_t have = 0;               // prompt tokens the slot or the donor gives it
    };
    bool next_admission(Admission & a);
    struct PrefixDonor {
        const Slot * slot = nullptr;  // copy the prompt's prefix from this slot's cache
        bool wait = false;            // leave the task queued for now
    };
    PrefixDonor prefix_donor(const Task & task, const Slot & chosen, size_t own) const;
    void exchange_with_prompt_cache(Slot & slot, const Task & task, size_t have);
    void keep_in_prompt_cache(const Slot & slot, bool checkpoint = false);
    // The prompt tokens a slot's own cells give the task: none where the
    // window layers no longer hold what that prefix reads.
    size_t resumable_prefix(const Slot & slot, const Task & task) const;
    // Where the slot's prompt must pause for a context checkpoint (SIZE_MAX:
    // nowhere ahead), and the checkpoint once it got there.
    size_t next_checkpoint(const Slot & slot) const;
    bool checkpoint_due(const Slot & slot, size_t n) const;
    void checkpoint(Slot & slot);
    void drop_cancelled();
    int32_t cells_for_step();
    void build_batch();
    // A generating slot whose context is full makes room (Task::context_shift).
    void shift_context(Slot & slot);
    void propose_drafts(const std::vector<Slot *> & generating, int32_t & budget);
    void decode_and_sample();
    void sample(Slot & slot);
    int32_t sample_token(Slot & slot, int32_t row, std::chrono::steady_clock::time_point now);
    void report_progress(Slot & slot);
    void pool(Slot & slot);
    bool over_time(const Slot & slot, std::chrono::steady_clock::time_point now) const;
    enum class StopKind { Eos, Word, Limit };  // why generation ended
    std::optional<StopKind> stop_after(const Slot & slot, int32_t token, int32_t n_past,
                                       std::chrono::steady_clock::time_point now) const;
    void finish(Slot & slot, StopKind kind);
    void fail(Slot & slot, int status, const std::string & message);
    void fail_group(const std::string & why);

    Engine & engine_;
    const int32_t n_ctx_slot_;
    const int32_t n_batch_;
    const int32_t max_queue_;
    Metrics * metrics_;
    const float prompt_similarity_;
    PromptCache prompt_cache_;
    // Context checkpoints per slot (0: none: off, or every cache resumes anywhere).
    const int32_t ctx_checkpoints_;
    const int32_t checkpoint_min_step_;
    int32_t step_prompt_tokens_ = 0;  // of the batch being decoded
    int32_t step_sampled_ = 0;
    std::vector<std::unique_ptr<Slot>> slots_;
    std::vector<std::unique_ptr<Drafter>> drafters_;
    Batch batch_;
    size_t prompt_rr_ = 0;  // which slot gets prompt budget first (fairness)

    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::unique_ptr<Task>> queue_;
    bool stopping_ = false;
    bool finished_ = false;  // the thread's loop has ended
    std::thread thread_;
    std::function<void()> on_idle_;
    std::function<void(const std::string &)> on_group_failed_;
    std::string group_failure_;  // under mutex_

    void publish_views();
    void run_slot_actions();
    void apply(SlotAction & a);
    void end_reasoning(SlotAction & a);
    struct PendingAction {
        SlotAction action;
        std::promise<SlotAction> done;
    };
    std::deque<PendingAction> actions_;  // under mutex_
    mutable std::mutex views_mutex_;
    std::vector<SlotView> views_;  // under views_mutex_

    std::chrono::seconds sleep_after_{0};
    std::atomic<bool> asleep_{false};
    std::atomic<int32_t> busy_{0};
    std::atomic<uint64_t> tasks_done_{0};
    std::atomic<uint64_t> steps_{0};
};

}  // namespace llama_tp::server
