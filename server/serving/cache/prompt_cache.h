#pragma once
// llama-server's prompt cache (--cache-ram): host-memory copies of the KV
// cells of prompts that slots gave up for other prompts, so that a later
// request sharing a long prefix with one of them gets its cells back instead
// of computing them again. Only the scheduler thread uses it.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace llama_tp::server {

struct CachedPrompt {
    std::vector<int32_t> tokens;
    std::vector<float> lora;     // the LoRA scales its cells were computed with
    std::vector<uint8_t> image;  // Engine::read_sequence of the tokens
    int32_t checkpoint_of = -1;  // a context checkpoint: the slot it was taken from
};

class PromptCache {
  public:
    // Whether the image of n tokens continues after its first m <= n
    // (Engine::image_resumable).
    using Resumable = std::function<bool(size_t n, size_t m)>;

    // limit_bytes: the most the images may hold together; < 0 no limit, 0
    // keeps nothing. resumable: null for images that resume anywhere.
    explicit PromptCache(int64_t limit_bytes, Resumable resumable = nullptr);

    bool enabled() const { return limit_ != 0; }
    // Whether an image of this size could be kept at all.
    bool fits(size_t bytes) const { return enabled() && (limit_ < 0 || bytes <= (size_t) limit_); }

    // Whether a kept prompt holds all of these tokens with these scales:
    // keeping them again would add nothing.
    bool covers(const std::vector<int32_t> & tokens, const std::vector<float> & lora) const;

    // Keeps a prompt, dropping the kept ones it holds whole, then the oldest
    // until it fits. False, keeping nothing new, when it alone is over the
    // limit.
    bool keep(CachedPrompt prompt);

    // Takes out the kept prompt that shares the longest prefix with the
    // first `usable` of `tokens` (those whose cells a request can reuse; all
    // by default), with the same scales, and resumes there, when that prefix
    // is longer than `have` and at least a quarter of the kept prompt (a long
    // prompt is not given up for a short part of it).
    std::optional<CachedPrompt> take(const std::vector<int32_t> & tokens, const std::vector<float> & lora, size_t have,
                                     size_t usable = SIZE_MAX);
    // The prefix take() would give, leaving the prompt kept (0: none).
    size_t longest_prefix(const std::vector<int32_t> & tokens, const std::vector<float> & lora,
                          size_t usable = SIZE_MAX) const;

    // Drops a slot's oldest context checkpoints beyond `most`.
    void drop_checkpoints_beyond(int32_t slot, size_t most);

    void clear() {
        kept_.clear();
        bytes_ = 0;
    }
    size_t size() const { return kept_.size(); }
    size_t bytes() const { return bytes_; }

  private:
    // The kept prompt take() would give, and its prefix (kept_.end(), have: none).
    std::deque<CachedPrompt>::const_iterator best(const std::vector<int32_t> & tokens, const std::vector<float> & lora,
                                                  size_t have, size_t usable, size_t & prefix) const;
    // Whether `kept` serves every request that `tokens` would.
    bool holds(const CachedPrompt & kept, const std::vector<int32_t> & tokens, const std::vector<float> & lora) const;

    int64_t limit_;
    Resumable resumable_;
    std::deque<CachedPrompt> kept_;  // oldest first
    size_t bytes_ = 0;
};

// llama-server's default --cache-ram; without the flag the cache takes at
// most 1/kDefaultCacheShare of the memory the machine has available once
// the model and its KV cache are loaded, so that the default cannot fill a
// smaller machine.
constexpr int32_t kDefaultCacheRamMib = 8192;
constexpr uint64_t kDefaultCacheShare = 4;

struct PromptCacheLimit {
    int64_t bytes = 0;   // < 0: no limit, 0: off
    std::string reason;  // one line for the log
};

// mib: --cache-ram's value (-1 no limit, 0 off); given: whether the user set
// it; available_bytes: the machine's available memory now (0: unknown).
PromptCacheLimit prompt_cache_limit(int32_t mib, bool given, uint64_t available_bytes);

}  // namespace llama_tp::server
