#pragma once
// Continuous batching. One thread owns the Engine. Each step it gathers the
// next token of every generating slot plus chunks of pending prompts into one
// Batch (at most n_batch tokens), decodes it, and samples for every slot whose
// logits came back. Tasks wait in a FIFO queue while all slots are busy.

#include "plugin/batch.h"
#include "plugin/engine.h"
#include "server/slot.h"
#include "server/task.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace llama_tp::server {

class Scheduler {
  public:
    // n_ctx_slot: positions each slot may use (prompt + generated).
    Scheduler(Engine & engine, int32_t n_slots, int32_t n_ctx_slot, int32_t n_batch);
    ~Scheduler();

    void start();
    // Fails queued and running tasks with 503 and joins the thread; later
    // submissions fail at once.
    void shutdown();

    // Queues a task; its events arrive on the returned channel.
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

  private:
    void run();
    void admit();  // queued tasks -> idle slots
    void drop_cancelled();
    void build_batch();
    void decode_and_sample();
    void sample(Slot & slot);
    void finish(Slot & slot, const char * reason);
    void fail(Slot & slot, int status, const std::string & message);

    Engine & engine_;
    const int32_t n_ctx_slot_;
    const int32_t n_batch_;
    std::vector<std::unique_ptr<Slot>> slots_;
    Batch batch_;
    size_t prompt_rr_ = 0;  // which slot gets prompt budget first (fairness)

    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::unique_ptr<Task>> queue_;
    bool stopping_ = false;
    std::thread thread_;

    std::atomic<int32_t> busy_{0};
    std::atomic<uint64_t> tasks_done_{0};
    std::atomic<uint64_t> steps_{0};
};

}  // namespace llama_tp::server
