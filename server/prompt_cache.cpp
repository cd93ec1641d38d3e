#include "server/prompt_cache.h"

#include "server/token_prefix.h"

#include <algorithm>

namespace llama_tp::server {

bool PromptCache::covers(const std::vector<int32_t> & tokens, const std::vector<float> & lora) const {
    return std::any_of(kept_.begin(), kept_.end(), [&](const CachedPrompt & p) {
        return p.lora == lora && common_prefix(p.tokens, tokens) == tokens.size();
    });
}

bool PromptCache::keep(CachedPrompt prompt) {
    const size_t n = prompt.image.size();
    if (!enabled() || (limit_ > 0 && n > (size_t) limit_)) return false;
    for (auto it = kept_.begin(); it != kept_.end();) {
        if (it->lora == prompt.lora && common_prefix(it->tokens, prompt.tokens) == it->tokens.size()) {
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

std::optional<CachedPrompt> PromptCache::take(const std::vector<int32_t> & prompt, const std::vector<float> & lora,
                                              size_t have) {
    auto best = kept_.end();
    size_t best_n = have;
    // Newest first, so that of equal prefixes the most recent one is taken.
    for (auto it = kept_.end(); it != kept_.begin();) {
        --it;
        if (it->lora != lora) continue;
        const size_t n = common_prefix(it->tokens, prompt);
        if (n > best_n && 4 * n >= it->tokens.size()) {
            best = it;
            best_n = n;
        }
    }
    if (best == kept_.end()) return std::nullopt;
    CachedPrompt found = std::move(*best);
    bytes_ -= found.image.size();
    kept_.erase(best);
    return found;
}

}  // namespace llama_tp::server
