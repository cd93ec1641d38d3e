// ngram-simple's proposals: what followed the last earlier occurrence of the
// slot's last n tokens, at most m of them and at most the step's room.

#include "server/ngram_drafter.h"

#include <gtest/gtest.h>

namespace {

using llama_tp::server::DraftRequest;
using llama_tp::server::NgramDrafter;
using Tokens = std::vector<int32_t>;

TEST(NgramDrafter, ProposesWhatFollowedTheLastEarlierOccurrence) {
    const NgramDrafter d(2, 8);
    // "1 2" occurs at 0 (followed by 3 4) and at 4 (followed by 9 1 2): the later one counts.
    EXPECT_EQ(d.propose({1, 2, 3, 4, 1, 2, 9, 1, 2}, 8), (Tokens{9, 1, 2}));
    EXPECT_EQ(d.propose({1, 2, 3, 4, 5, 1, 2}, 8), (Tokens{3, 4, 5, 1, 2}));
}

TEST(NgramDrafter, StopsAtTheSizeAndTheRoom) {
    const NgramDrafter d(1, 3);
    const Tokens t = {7, 1, 2, 3, 4, 5, 7};
    EXPECT_EQ(d.propose(t, 10), (Tokens{1, 2, 3}));
    EXPECT_EQ(d.propose(t, 2), (Tokens{1, 2}));
    EXPECT_TRUE(d.propose(t, 0).empty());
}

TEST(NgramDrafter, NothingWithoutAnEarlierOccurrence) {
    const NgramDrafter d(3, 8);
    EXPECT_TRUE(d.propose({1, 2, 3, 4, 5, 6}, 8).empty());
    EXPECT_TRUE(d.propose({1, 2, 3}, 8).empty());  // the pattern is the whole text
    EXPECT_TRUE(d.propose({}, 8).empty());
    // A run of one token: the pattern's own start one position back.
    EXPECT_EQ(d.propose({5, 5, 5, 5}, 8), (Tokens{5}));
}

TEST(NgramDrafter, RequestsReadTheCacheThenTheLastToken) {
    NgramDrafter d(2, 4);
    const Tokens cached = {1, 2, 3, 4, 1};
    DraftRequest hit;
    hit.cached = &cached;
    hit.last = 2;  // "1 2" again
    hit.n_max = 4;
    DraftRequest miss = hit;
    miss.last = 9;
    std::vector<DraftRequest *> requests = {&hit, &miss};
    d.draft(requests);
    EXPECT_EQ(hit.tokens, (Tokens{3, 4, 1, 2}));
    EXPECT_TRUE(miss.tokens.empty());
}

}  // namespace
