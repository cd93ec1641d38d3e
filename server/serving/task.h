#pragma once
// A generation task handed from an HTTP thread to the scheduler, and the
// channel the scheduler answers on (token text as it is produced, then one
// final event). The HTTP side cancels through the same channel.

#include "runtime/text/sampler.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace llama_tp::server {

// A sampled token's log-probability and its most likely alternatives'; with
// Task::post_sampling_probs their probabilities after the sampler chain.
struct TokenLogprob {
    int32_t token = -1;
    std::string piece;
    float logprob = 0.0f;
    std::vector<TokenProb> top;  // most likely alternatives, when asked for
};

struct Timings {
    int32_t prompt_n = 0;  // prompt tokens actually decoded (not cached)
    double prompt_ms = 0;
    int32_t predicted_n = 0;
    double predicted_ms = 0;
    int32_t draft_n = 0;           // speculative decoding: tokens proposed
    int32_t draft_n_accepted = 0;  // and confirmed
};

struct TaskEvent {
    // Progress: prompt tokens decoded so far (n_prompt, n_cached, n_processed, timings.prompt_ms).
    enum class Kind { Text, Done, Error, Progress };
    Kind kind = Kind::Text;

    // Text: newly releasable text, and the tokens that produced it (logprobs).
    std::string text;
    std::vector<TokenLogprob> logprobs;
    std::vector<int32_t> tokens;  // the token ids sampled for this text

    // Text and Done.
    int32_t id_slot = -1;
    int32_t n_prompt = 0;
    int32_t n_completion = 0;  // tokens sampled so far

    // Done.
    std::string finish_reason;  // "stop" or "length"
    std::string stop_type;      // llama-server's: "eos", "word" or "limit"
    std::string stopping_word;  // the stop string that matched ("word")
    bool truncated = false;     // a context shift dropped tokens, or the context ended generation
    int32_t n_cached = 0;
    int32_t n_processed = 0;  // Progress
    // Done of an embedding task: embedding_rows rows of n_embd floats (one when pooled).
    std::vector<float> embedding;
    int32_t embedding_rows = 0;
    bool has_timings = false;  // Text: timings hold the figures so far
    Timings timings;

    // Error.
    int status = 500;
    std::string message;
};

class TaskChannel {
  public:
    void push(TaskEvent event) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            events_.push_back(std::move(event));
        }
        cv_.notify_all();
    }

    // Waits up to `timeout` for events; moves all pending ones into `out`.
    // Returns false on timeout with nothing pending.
    bool pop_all(std::vector<TaskEvent> & out, std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lock(mutex_);
        if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) {
            return false;
        }
        while (!events_.empty()) {
            out.push_back(std::move(events_.front()));
            events_.pop_front();
        }
        return true;
    }

    // The HTTP side gave up (client gone); the scheduler frees the slot.
    void cancel() { cancelled_ = true; }
    bool cancelled() const { return cancelled_; }

  private:
    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<TaskEvent> events_;
    std::atomic<bool> cancelled_{false};
};

// How an embedding task turns its prompt's hidden states into its answer.
// Rank: the reranker's classification head over the token it scores
// (ClassifierHead), its outputs the answer.
enum class Pooling { None, Mean, Cls, Last, Rank };

struct Task {
    uint64_t id = 0;
    std::vector<int32_t> prompt;
    // Chat: ascending prompt positions where a user message opens (context
    // checkpoints are taken there).
    std::vector<size_t> user_starts;
    int32_t n_predict = 0;         // resolved cap on generated tokens (>= 0)
    bool context_ends_it = false;  // the cap is where the slot's context ends (no context shift)
    std::vector<std::string> stop;
    bool ignore_eos = false;
    bool cache_prompt = true;  // false: reuse no cached prefix
    // After the common prefix, cached chunks of at least this many tokens
    // that the prompt holds too are moved to its positions (0: none).
    int32_t n_cache_reuse = 0;
    std::vector<int32_t> preserved_tokens;  // sorted: special tokens shown as text
    bool special_as_text = false;           // every special token shown as text (--special)
    int32_t n_top_logprobs = -1;            // -1: no logprobs; 0: only the chosen token's
    bool post_sampling_probs = false;       // TokenLogprob holds probabilities after the sampler chain
    int32_t id_slot = -1;                   // only this slot may take the task (-1: any)
    int32_t t_max_predict_ms = 0;           // generation time limit once a line is complete (0: none)
    bool timings_per_token = false;         // Text events carry the timings so far
    bool return_progress = false;           // Progress events while the prompt is decoded
    // A slot whose context fills while generating drops n_discard tokens
    // after its first n_keep and moves the rest back, as llama-server's
    // --context-shift does (n_keep -1: the whole prompt; n_discard 0: half
    // of what follows n_keep).
    bool context_shift = false;
    int32_t n_keep = 0;
    int32_t n_discard = 0;
    bool embedding = false;   // no generation: the Done event carries the pooled hidden states
    std::vector<float> lora;  // each LoRA adapter's scale for this task (empty: no adapters)
    Pooling pooling = Pooling::Mean;
    // The response's id ("chatcmpl-..."), by which a control request finds
    // the task, and whether it may end the thinking (reasoning_control).
    std::string completion_id;
    // Its generation settings as JSON text, for /slots (shared: the views
    // of every step copy the pointer, not the text).
    std::shared_ptr<const std::string> settings;
    bool reasoning_control = false;
    std::unique_ptr<Sampler> sampler;
    std::shared_ptr<TaskChannel> channel = std::make_shared<TaskChannel>();
    std::chrono::steady_clock::time_point t_submit = std::chrono::steady_clock::now();
};

}  // namespace llama_tp::server
