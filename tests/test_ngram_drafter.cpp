// ngram-simple's proposals, by llama-server's rules: what followed the last
// earlier occurrence (not at position 0) of the slot's last n tokens, at
// most m of them and at most the step's room, none shorter than n, and none
// before the slot holds n + m + 3 tokens (the last sampled one included).

#include "server/ngram_drafter.h"

#include <gtest/gtest.h>

namespace {

using llama_tp::server::DraftRequest;
using llama_tp::server::NgramDrafter;
using Tokens = std::vector<int32_t>;

TEST(NgramDrafter, ProposesWhatFollowedTheLastEarlierOccurrence) {
    const NgramDrafter d(2, 3);
    // "1 2" occurs at 1 (followed by 3 4 5) and at 6 (followed by 6 7 1): the later one counts.
    EXPECT_EQ(d.propose({0, 1, 2, 3, 4, 5, 1, 2, 6, 7, 1, 2}, 8), (Tokens{6, 7, 1}));
    EXPECT_EQ(d.propose({0, 1, 2, 3, 4, 5, 8, 9, 1, 2}, 8), (Tokens{3, 4, 5}));
}

TEST(NgramDrafter, StopsAtTheSizeAndTheRoom) {
    const NgramDrafter d(1, 3);
    const Tokens t = {0, 7, 1, 2, 3, 4, 5, 7};
    EXPECT_EQ(d.propose(t, 10), (Tokens{1, 2, 3}));
    EXPECT_EQ(d.propose(t, 2), (Tokens{1, 2}));
    EXPECT_TRUE(d.propose(t, 0).empty());
}

TEST(NgramDrafter, NothingWithoutAnEarlierOccurrenceOrEnoughText) {
    const NgramDrafter d(2, 2);
    EXPECT_TRUE(d.propose({1, 2, 3, 4, 5, 6, 7}, 8).empty());
    EXPECT_TRUE(d.propose({}, 8).empty());
    EXPECT_TRUE(d.propose({1, 2, 3, 1, 2}, 8).empty());           // fewer than n + m + 3 tokens
    EXPECT_TRUE(d.propose({1, 2, 3, 4, 5, 6, 1, 2}, 8).empty());  // only at position 0
    // A proposal shorter than n is none: the earlier "8 9" is followed by one token before the last.
    EXPECT_TRUE(d.propose({0, 1, 2, 3, 4, 5, 8, 9, 8, 9}, 8).empty());
}

TEST(NgramDrafter, RequestsReadTheCacheThenTheLastToken) {
    NgramDrafter d(2, 2);
    const Tokens cached = {0, 1, 2, 3, 4, 5, 1};
    DraftRequest hit;
    hit.cached = &cached;
    hit.last = 2;  // "1 2" again
    hit.n_max = 4;
    DraftRequest miss = hit;
    miss.last = 9;
    std::vector<DraftRequest *> requests = {&hit, &miss};
    d.draft(requests);
    EXPECT_EQ(hit.tokens, (Tokens{3, 4}));
    EXPECT_TRUE(miss.tokens.empty());
}

}  // namespace
