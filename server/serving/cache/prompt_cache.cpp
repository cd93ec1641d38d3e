#include "server/serving/cache/prompt_cache.h"

#include "server/serving/cache/token_prefix.h"

#include <algorithm>

namespace llama_tp::server {

PromptCache::PromptCache(int64_t limit_bytes, Resumable resumable)
    : limit_(limit_bytes), resumable_(resumable ? std::move(resumable) : [](size_t, size_t) { return true; }) {}

bool PromptCache::holds(const CachedPrompt & kept, const std::vector<int32_t> & tokens,
                        const std::vector<float> & lora) const {
    return kept.lora == lora && common_prefix(kept.tokens, tokens) == tokens.size() &&
           resumable_(kept.tokens.size(), tokens.size());
}

bool PromptCache::covers(const std::vector<int32_t> & tokens, const std::vector<float> & lora) const {
    return std::any_of(kept_.begin(), kept_.end(), [&](const CachedPrompt & p) { return holds(p, tokens, lora); });
}

void PromptCache::drop_checkpoints_beyond(int32_t slot, size_t most) {
    size_t n = 0;
    for (const CachedPrompt & p : kept_) n += p.checkpoint_of == slot;
    for (auto it = kept_.begin(); n > most && it != kept_.end();) {
        if (it->checkpoint_of != slot) {
            ++it;
            continue;
        }
        bytes_ -= it->image.size();
        it = kept_.erase(it);
        n--;
    }
}

bool PromptCache::keep(CachedPrompt prompt) {
    const size_t n = prompt.image.size();
    if (!fits(n)) return false;
    for (auto it = kept_.begin(); it != kept_.end();) {
        if (holds(prompt, it->tokens, it->lora)) {
            bytes_ -= it->image.size();
            it = kept_.erase(it);
        } else {
            ++it;
        }
    }
    while (limit_ > 0 && !kept_.empty() && bytes_ + n > (size_t) limit_) {
        bytes_ -= kept_.front().image.size();
        kept_.pop_front();
    }
    bytes_ += n;
    kept_.push_back(std::move(prompt));
    return true;
}

std::deque<CachedPrompt>::const_iterator PromptCache::best(const std::vector<int32_t> & tokens,
                                                           const std::vector<float> & lora, size_t have, size_t usable,
                                                           size_t & prefix) const {
    auto found = kept_.end();
    prefix = have;
    // Newest first, so that of equal prefixes the most recent one is taken.
    for (auto it = kept_.end(); it != kept_.begin();) {
        --it;
        if (it->lora != lora) continue;
        const size_t n = std::min(common_prefix(it->tokens, tokens), usable);
        if (n > prefix && 4 * n >= it->tokens.size() && resumable_(it->tokens.size(), n)) {
            found = it;
            prefix = n;
        }
    }
    return found;
}

std::optional<CachedPrompt> PromptCache::take(const std::vector<int32_t> & tokens, const std::vector<float> & lora,
                                              size_t have, size_t usable) {
    size_t prefix = 0;
    const auto found = best(tokens, lora, have, usable, prefix);
    if (found == kept_.end()) return std::nullopt;
    const auto it = kept_.begin() + (found - kept_.cbegin());
    CachedPrompt prompt = std::move(*it);
    bytes_ -= prompt.image.size();
    kept_.erase(it);
    return prompt;
}

size_t PromptCache::longest_prefix(const std::vector<int32_t> & tokens, const std::vector<float> & lora,
                                   size_t usable) const {
    size_t prefix = 0;
    return best(tokens, lora, 0, usable, prefix) == kept_.end() ? 0 : prefix;
}

PromptCacheLimit prompt_cache_limit(int32_t mib, bool given, uint64_t available_bytes) {
    const auto in_mib = [](uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; };
    PromptCacheLimit l;
    if (mib == 0) return {0, "off (--cache-ram 0)"};
    if (mib < 0) return {-1, "no limit (--cache-ram -1)"};
    l.bytes = (int64_t) mib << 20;
    if (given) {
        l.reason = in_mib((uint64_t) l.bytes) + " at most (--cache-ram)";
        return l;
    }
    const uint64_t share = available_bytes / kDefaultCacheShare;
    if (available_bytes > 0 && share < (uint64_t) l.bytes) {
        l.bytes = (int64_t) share;
        l.reason = in_mib(share) + " at most: a quarter of the " + in_mib(available_bytes) +
                   " available after the model, instead of the default " + std::to_string(mib) +
                   " MiB (--cache-ram sets it)";
    } else {
        l.reason = in_mib((uint64_t) l.bytes) + " at most (the default; --cache-ram sets it)";
    }
    return l;
}

}  // namespace llama_tp::server
