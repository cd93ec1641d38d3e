// The prompt cache of --cache-ram: what it keeps, what it gives back, and
// what it drops to stay under its limit.

#include "server/serving/cache/prompt_cache.h"

#include <gtest/gtest.h>

using llama_tp::server::CachedPrompt;
using llama_tp::server::PromptCache;

namespace {

// A prompt of tokens first, first + 1, ... with an image of `bytes` bytes
// whose first byte names it.
CachedPrompt prompt(int32_t first, size_t n, size_t bytes, std::vector<float> lora = {}) {
    CachedPrompt p;
    for (size_t i = 0; i < n; ++i) p.tokens.push_back(first + (int32_t) i);
    p.lora = std::move(lora);
    p.image.assign(bytes, (uint8_t) first);
    return p;
}

std::vector<int32_t> tokens(int32_t first, size_t n) {
    return prompt(first, n, 0).tokens;
}

}  // namespace

TEST(PromptCache, GivesBackTheLongestSharedPrefix) {
    PromptCache cache(-1);
    ASSERT_TRUE(cache.keep(prompt(0, 100, 10)));
    ASSERT_TRUE(cache.keep(prompt(1000, 100, 20)));
    std::vector<int32_t> ask = tokens(1000, 60);
    ask.push_back(7);  // diverges after 60 tokens
    auto found = cache.take(ask, {}, 0);
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->tokens.front(), 1000);
    EXPECT_EQ(found->image.size(), 20u);
    // Taken out: the cache no longer holds it.
    EXPECT_EQ(cache.size(), 1u);
    EXPECT_EQ(cache.bytes(), 10u);
    EXPECT_FALSE(cache.take(ask, {}, 0).has_value());
}

TEST(PromptCache, GivesNothingThatIsNoBetterThanWhatTheSlotHas) {
    PromptCache cache(-1);
    ASSERT_TRUE(cache.keep(prompt(0, 100, 10)));
    EXPECT_FALSE(cache.take(tokens(0, 50), {}, 50).has_value());
    EXPECT_TRUE(cache.take(tokens(0, 50), {}, 49).has_value());
}

TEST(PromptCache, KeepsALongPromptForAShortPartOfIt) {
    PromptCache cache(-1);
    ASSERT_TRUE(cache.keep(prompt(0, 100, 10)));
    EXPECT_FALSE(cache.take(tokens(0, 24), {}, 0).has_value());  // under a quarter
    EXPECT_TRUE(cache.take(tokens(0, 25), {}, 0).has_value());
}

TEST(PromptCache, MatchesLoraScales) {
    PromptCache cache(-1);
    ASSERT_TRUE(cache.keep(prompt(0, 100, 10, {0.5f})));
    EXPECT_FALSE(cache.take(tokens(0, 100), {}, 0).has_value());
    EXPECT_FALSE(cache.take(tokens(0, 100), {1.0f}, 0).has_value());
    EXPECT_FALSE(cache.covers(tokens(0, 50), {}));
    EXPECT_TRUE(cache.covers(tokens(0, 50), {0.5f}));
    EXPECT_TRUE(cache.take(tokens(0, 100), {0.5f}, 0).has_value());
}

TEST(PromptCache, ANewPromptReplacesTheKeptPrefixesItHolds) {
    PromptCache cache(-1);
    ASSERT_TRUE(cache.keep(prompt(0, 40, 4)));
    ASSERT_TRUE(cache.keep(prompt(500, 40, 4)));
    ASSERT_TRUE(cache.keep(prompt(0, 80, 8)));  // holds the first whole
    EXPECT_EQ(cache.size(), 2u);
    EXPECT_EQ(cache.bytes(), 12u);
    EXPECT_TRUE(cache.covers(tokens(0, 80), {}));
    EXPECT_FALSE(cache.covers(tokens(0, 81), {}));
}

TEST(PromptCache, DropsTheOldestToStayUnderItsLimit) {
    PromptCache cache(25);
    ASSERT_TRUE(cache.keep(prompt(0, 10, 10)));
    ASSERT_TRUE(cache.keep(prompt(100, 10, 10)));
    ASSERT_TRUE(cache.keep(prompt(200, 10, 10)));  // the first goes
    EXPECT_EQ(cache.size(), 2u);
    EXPECT_EQ(cache.bytes(), 20u);
    EXPECT_FALSE(cache.take(tokens(0, 10), {}, 0).has_value());
    EXPECT_TRUE(cache.take(tokens(100, 10), {}, 0).has_value());
    // One prompt over the whole limit is not kept and drops nothing.
    EXPECT_FALSE(cache.keep(prompt(300, 10, 26)));
    EXPECT_EQ(cache.size(), 1u);
}

TEST(PromptCache, OfEqualPrefixesTheNewestIsTaken) {
    PromptCache cache(-1);
    CachedPrompt a = prompt(0, 30, 1);
    a.tokens.push_back(1);
    CachedPrompt b = prompt(0, 30, 2);
    b.tokens.push_back(2);
    ASSERT_TRUE(cache.keep(a));
    ASSERT_TRUE(cache.keep(b));
    auto found = cache.take(tokens(0, 30), {}, 0);
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->image.size(), 2u);
}

TEST(PromptCache, ZeroKeepsNothing) {
    PromptCache cache(0);
    EXPECT_FALSE(cache.enabled());
    EXPECT_FALSE(cache.keep(prompt(0, 10, 1)));
    EXPECT_EQ(cache.size(), 0u);
}

TEST(PromptCache, WindowedImagesServeOnlyWhereTheyResume) {
    // As sliding-window layers keeping 10 cells: an image of n tokens resumes
    // at m only at its end, or anywhere when it is within the window.
    PromptCache cache(-1, [](size_t n, size_t m) { return m == 0 || m >= n || n <= 10; });
    ASSERT_TRUE(cache.keep(prompt(0, 40, 4)));
    EXPECT_FALSE(cache.take(tokens(0, 30), {}, 0).has_value());  // its window is gone at 30
    EXPECT_FALSE(cache.covers(tokens(0, 30), {}));
    EXPECT_TRUE(cache.covers(tokens(0, 40), {}));
    // A shorter kept prompt is not dropped for a longer one that cannot
    // resume where it ends.
    ASSERT_TRUE(cache.keep(prompt(0, 60, 6)));
    EXPECT_EQ(cache.size(), 2u);
    auto found = cache.take(tokens(0, 45), {}, 0);
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->tokens.size(), 40u);
}

TEST(PromptCache, CountsOnlyTheUsableTokensAndCanLookWithoutTaking) {
    PromptCache cache(-1);
    ASSERT_TRUE(cache.keep(prompt(0, 40, 4)));
    // A request of the same 40 tokens reuses 39 (its last is decoded).
    EXPECT_EQ(cache.longest_prefix(tokens(0, 40), {}, 39), 39u);
    EXPECT_EQ(cache.longest_prefix(tokens(0, 40), {}), 40u);
    EXPECT_EQ(cache.longest_prefix(tokens(0, 40), {0.5f}), 0u);
    EXPECT_EQ(cache.size(), 1u);  // looking takes nothing
    // A slot that already holds 39 gains nothing from it.
    EXPECT_FALSE(cache.take(tokens(0, 40), {}, 39, 39).has_value());
    EXPECT_TRUE(cache.take(tokens(0, 40), {}, 38, 39).has_value());
}

TEST(PromptCache, KeepsASlotsNewestCheckpointsOnly) {
    PromptCache cache(-1, [](size_t n, size_t m) { return m >= n; });  // windowed: only whole images resume
    for (int32_t i = 0; i < 3; ++i) {
        CachedPrompt p = prompt(1, 10 + 10 * (size_t) i, 100);
        p.checkpoint_of = 0;
        ASSERT_TRUE(cache.keep(std::move(p)));
    }
    CachedPrompt other = prompt(1, 50, 100);
    other.checkpoint_of = 1;
    ASSERT_TRUE(cache.keep(std::move(other)));
    ASSERT_TRUE(cache.keep(prompt(500, 10, 100)));  // not a checkpoint
    EXPECT_EQ(cache.size(), 5u);
    cache.drop_checkpoints_beyond(0, 1);
    EXPECT_EQ(cache.size(), 3u);
    EXPECT_EQ(cache.bytes(), 300u);
    // Slot 0's 10- and 20-token checkpoints are gone, its 30-token one stays.
    EXPECT_EQ(cache.longest_prefix(tokens(1, 25), {}), 0u);
    EXPECT_EQ(cache.longest_prefix(tokens(1, 35), {}), 30u);
    EXPECT_EQ(cache.longest_prefix(tokens(500, 12), {}), 10u);
}

TEST(PromptCacheLimit, TheDefaultTakesAQuarterOfAvailableMemoryAtMost) {
    using llama_tp::server::prompt_cache_limit;
    const uint64_t gib = 1ull << 30;
    // A small machine: 8 GiB available after the model gives 2 GiB.
    auto l = prompt_cache_limit(8192, false, 8 * gib);
    EXPECT_EQ(l.bytes, (int64_t) (2 * gib));
    EXPECT_NE(l.reason.find("2048 MiB at most"), std::string::npos) << l.reason;
    EXPECT_NE(l.reason.find("8192 MiB available"), std::string::npos) << l.reason;
    // A large one keeps llama-server's default.
    l = prompt_cache_limit(8192, false, 256 * gib);
    EXPECT_EQ(l.bytes, (int64_t) (8 * gib));
    EXPECT_NE(l.reason.find("the default"), std::string::npos) << l.reason;
    // Unknown memory: the default.
    EXPECT_EQ(prompt_cache_limit(8192, false, 0).bytes, (int64_t) (8 * gib));
    // Given: as asked, whatever the machine has.
    l = prompt_cache_limit(8192, true, 8 * gib);
    EXPECT_EQ(l.bytes, (int64_t) (8 * gib));
    EXPECT_NE(l.reason.find("(--cache-ram)"), std::string::npos) << l.reason;
    EXPECT_EQ(prompt_cache_limit(-1, false, 8 * gib).bytes, -1);
    EXPECT_EQ(prompt_cache_limit(0, false, 8 * gib).bytes, 0);
}
