#pragma once
// One slot: a sequence of the engine's KV cache (sequence id = slot index)
// and the request, if any, that is using it. Only the scheduler thread
// touches slots.

#include "runtime/engine.h"
#include "server/serving/task.h"
#include "server/serving/text_stream.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace llama_tp::server {

class Slot {
  public:
    enum class State { Idle, Prompt, Generating };

    explicit Slot(int32_t id) : id(id) {}

    const int32_t id;
    State state = State::Idle;
    std::unique_ptr<Task> task;

    // Tokens held in this sequence's KV cache, positions 0..n-1. Kept after a
    // request ends so that the next one can reuse a common prefix.
    std::vector<int32_t> kv_tokens;
    // The LoRA scales those tokens were computed with: a prefix is reused
    // only by a task with the same.
    std::vector<float> kv_lora;

    size_t n_prompt_done = 0;     // prompt tokens in the cache (or in this step's batch)
    size_t checkpoint_at = 0;     // tokens of the newest context checkpoint of these cells (0: none)
    int32_t n_cached = 0;         // of those, reused from an earlier request
    int32_t pending = -1;         // last sampled token, decoded in the next step
    int32_t n_decoded = 0;        // tokens sampled for this request
    bool has_new_line = false;    // the text so far holds a newline (t_max_predict_ms)
    bool truncated = false;       // a context shift dropped some of the request's tokens
    bool prompt_in_step = false;  // this step's batch holds prompt tokens of this slot
    TextStream stream;

    // Per decode step.
    int32_t logits_row = -1;        // batch row whose logits this slot samples from
    int32_t first_row = -1;         // embedding tasks: the batch row of this step's first prompt token
    std::vector<float> hidden;      // embedding tasks: pooled (or every) hidden state so far
    std::vector<int32_t> inflight;  // tokens this slot put into the current batch
    // Speculative decoding: tokens proposed to follow `pending`, in the
    // current batch after it (rows logits_row + 1...), checked when sampling.
    std::vector<int32_t> draft;
    int32_t draft_by = -1;  // the drafter (its index in the scheduler's) that proposed it
    // A recurrent model's slot whose draft was rejected in part went back to
    // the state saved before it: these tokens (the sampled one and the
    // confirmed drafts) are decoded again, before `pending`, in the next step.
    std::vector<int32_t> replay;
    int32_t n_drafted = 0;         // proposed tokens this request's steps checked
    int32_t n_draft_accepted = 0;  // of those, the ones sampling confirmed

    std::chrono::steady_clock::time_point t_start;
    std::chrono::steady_clock::time_point t_last_used;  // when its last task ended (never: the epoch)
    std::chrono::steady_clock::time_point t_first_token;

    // What /slots shows of a task, kept from the last one while the slot is idle.
    struct TaskSummary {
        uint64_t id = 0;
        int32_t n_prompt = 0;
        int32_t n_predict = 0;
        std::shared_ptr<const std::string> settings;
        static TaskSummary of(const Task & t) { return {t.id, (int32_t) t.prompt.size(), t.n_predict, t.settings}; }
    };
    TaskSummary last_task;

    bool busy() const { return state != State::Idle; }
    int32_t n_past() const { return (int32_t) kv_tokens.size() + (int32_t) inflight.size(); }

    // Length of the longest common prefix of the cache and `tokens`.
    size_t common_prefix(const std::vector<int32_t> & tokens) const;
    // The prefix of the task's prompt this cache can give it: none when the
    // task's LoRA scales differ from the cache's.
    size_t reusable_prefix(const Task & t) const { return t.lora == kv_lora ? common_prefix(t.prompt) : 0; }

    // Takes a task: keeps the longest reusable cache prefix (always leaving at
    // least the last prompt token to decode, for its logits; none when the task
    // asks not to reuse the cache) and drops the rest. With a donor, another
    // slot whose cache holds a longer prefix of the prompt, the cells of that
    // longer part are copied from it instead of computed.
    void begin(std::unique_ptr<Task> t, Engine & engine, const Slot * donor = nullptr);

    // After a successful decode: the in-flight tokens are now in the cache.
    void commit() {
        kv_tokens.insert(kv_tokens.end(), inflight.begin(), inflight.end());
        inflight.clear();
    }

    // Back to idle; the cache stays for reuse.
    std::unique_ptr<Task> release();

    // Drops the cache too (after a failed decode the cache state is unknown).
    void clear_cache(Engine & engine);

  private:
    size_t reuse_chunks(Engine & engine, size_t keep, size_t most, int32_t min_chunk);
};

}  // namespace llama_tp::server
