#pragma once
// llama-server's prompt cache (--cache-ram): host-memory copies of the KV
// cells of prompts that slots gave up for other prompts, so that a later
// request sharing a long prefix with one of them gets its cells back instead
// of computing them again. Only the scheduler thread uses it.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace llama_tp::server {

struct CachedPrompt {
    std::vector<int32_t> tokens;
    std::vector<float> lora;     // the LoRA scales its cells were computed with
    std::vector<uint8_t> image;  // Engine::read_sequence of the tokens
};

class PromptCache {
  public:
    // limit_bytes: the most the images may hold together; < 0 no limit, 0
    // keeps nothing.
    explicit PromptCache(int64_t limit_bytes) : limit_(limit_bytes) {}

    bool enabled() const { return limit_ != 0; }

    // Whether a kept prompt holds all of these tokens with these scales:
    // keeping them again would add nothing.
    bool covers(const std::vector<int32_t> & tokens, const std::vector<float> & lora) const;

    // Keeps a prompt, dropping the kept ones it holds whole, then the oldest
    // until it fits. False, keeping nothing new, when it alone is over the
    // limit.
    bool keep(CachedPrompt prompt);

    // Takes out the kept prompt that shares the longest prefix with `prompt`
    // (with the same scales), when that prefix is longer than `have` and at
    // least a quarter of the kept prompt (a long prompt is not given up for
    // a short part of it).
    std::optional<CachedPrompt> take(const std::vector<int32_t> & prompt, const std::vector<float> & lora, size_t have);

    size_t size() const { return kept_.size(); }
    size_t bytes() const { return bytes_; }

  private:
    int64_t limit_;
    std::deque<CachedPrompt> kept_;  // oldest first
    size_t bytes_ = 0;
};

}  // namespace llama_tp::server
