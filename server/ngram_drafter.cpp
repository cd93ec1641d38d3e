#include "server/ngram_drafter.h"

#include <algorithm>

namespace llama_tp::server {

NgramDrafter::NgramDrafter(int32_t size_n, int32_t size_m)
    : size_n_(std::max<int32_t>(1, size_n)), size_m_(std::max<int32_t>(0, size_m)) {}

// llama-server's rules, over the slot's tokens before the last sampled one
// (h of them): more than n + m + 1 of them, the most recent earlier
// occurrence (the text nearest to where we are) other than at position 0
// and other than one overlapping the last n, a proposal taken from those h
// tokens, and none shorter than n.
std::vector<int32_t> NgramDrafter::propose(const std::vector<int32_t> & tokens, int32_t n_max) const {
    const int64_t h = (int64_t) tokens.size() - 1;
    if (n_max <= 0 || h <= (int64_t) size_n_ + size_m_ + 1) return {};
    const auto pattern = tokens.end() - size_n_;
    for (int64_t start = h - size_n_ - 1; start > 0; --start) {
        if (!std::equal(pattern, tokens.end(), tokens.begin() + start)) continue;
        const int64_t from = start + size_n_;
        const int64_t length = std::min<int64_t>(size_m_, h - from);
        if (length < size_n_) return {};
        return {tokens.begin() + from, tokens.begin() + from + std::min<int64_t>(length, n_max)};
    }
    return {};
}

void NgramDrafter::draft(std::vector<DraftRequest *> & requests) {
    std::vector<int32_t> tokens;
    for (DraftRequest * r : requests) {
        tokens.assign(r->cached->begin(), r->cached->end());
        tokens.push_back(r->last);
        r->tokens = propose(tokens, r->n_max);
    }
}

}  // namespace llama_tp::server
