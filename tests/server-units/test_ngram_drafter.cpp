// The n-gram kinds of speculative decoding through libcommon, as
// llama-server drafts them. ngram-simple by llama-server's rules: what
// followed the last earlier occurrence (not at position 0) of the slot's
// last n tokens, at most m of them and at most the step's room, none shorter
// than n, and none before the slot holds n + m + 3 tokens (the last sampled
// one included). The other kinds: that each reads its settings, its
// lookup files and the accept counts the scheduler reports.

#include "server/speculative/ngram_drafter.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "ngram-cache.h"
#include "runtime/error.h"

namespace {

using llama_tp::server::DraftRequest;
using llama_tp::server::NgramDrafter;
using Tokens = std::vector<int32_t>;

common_params_speculative kinds(std::vector<common_speculative_type> types) {
    common_params_speculative p;
    p.types = std::move(types);
    return p;
}

common_params_speculative simple(uint16_t n, uint16_t m) {
    common_params_speculative p = kinds({COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE});
    p.ngram_simple.size_n = n;
    p.ngram_simple.size_m = m;
    return p;
}

// The proposal for a slot holding `tokens`, the last of them sampled last.
Tokens propose(NgramDrafter & d, const Tokens & tokens, int32_t n_max, int32_t seq = 0) {
    if (tokens.empty()) return {};
    const Tokens cached(tokens.begin(), tokens.end() - 1);
    DraftRequest r;
    r.seq = seq;
    r.cached = &cached;
    r.last = tokens.back();
    r.n_max = n_max;
    std::vector<DraftRequest *> requests = {&r};
    d.draft(requests);
    return r.tokens;
}

TEST(NgramDrafter, SimpleProposesWhatFollowedTheLastEarlierOccurrence) {
    NgramDrafter d(simple(2, 3), 1);
    EXPECT_STREQ(d.name(), "ngram-simple");
    // "1 2" occurs at 1 (followed by 3 4 5) and at 6 (followed by 6 7 1): the later one counts.
    EXPECT_EQ(propose(d, {0, 1, 2, 3, 4, 5, 1, 2, 6, 7, 1, 2}, 8), (Tokens{6, 7, 1}));
    EXPECT_EQ(propose(d, {0, 1, 2, 3, 4, 5, 8, 9, 1, 2}, 8), (Tokens{3, 4, 5}));
}

TEST(NgramDrafter, SimpleStopsAtTheSizeAndTheRoom) {
    NgramDrafter d(simple(1, 3), 1);
    const Tokens t = {0, 7, 1, 2, 3, 4, 5, 7};
    EXPECT_EQ(propose(d, t, 10), (Tokens{1, 2, 3}));
    EXPECT_EQ(propose(d, t, 2), (Tokens{1, 2}));
    EXPECT_TRUE(propose(d, t, 0).empty());
}

TEST(NgramDrafter, SimpleNothingWithoutAnEarlierOccurrenceOrEnoughText) {
    NgramDrafter d(simple(2, 2), 1);
    EXPECT_TRUE(propose(d, {1, 2, 3, 4, 5, 6, 7}, 8).empty());
    EXPECT_TRUE(propose(d, {1, 2, 3, 1, 2}, 8).empty());           // fewer than n + m + 3 tokens
    EXPECT_TRUE(propose(d, {1, 2, 3, 4, 5, 6, 1, 2}, 8).empty());  // only at position 0
    // A proposal shorter than n is none: the earlier "8 9" is followed by one token before the last.
    EXPECT_TRUE(propose(d, {0, 1, 2, 3, 4, 5, 8, 9, 8, 9}, 8).empty());
}

TEST(NgramDrafter, EachSlotDraftsFromItsOwnTokens) {
    NgramDrafter d(simple(2, 2), 2);
    const Tokens a = {0, 1, 2, 3, 4, 5, 1}, b = {0, 1, 2, 7, 8, 5, 1};
    DraftRequest ra, rb, miss;
    ra.seq = 0, ra.cached = &a, ra.last = 2, ra.n_max = 4;  // "1 2" again
    rb.seq = 1, rb.cached = &b, rb.last = 2, rb.n_max = 4;
    miss = ra;
    miss.last = 9;
    std::vector<DraftRequest *> both = {&ra, &rb};
    d.draft(both);
    EXPECT_EQ(ra.tokens, (Tokens{3, 4}));
    EXPECT_EQ(rb.tokens, (Tokens{7, 8}));
    std::vector<DraftRequest *> one = {&miss};
    d.draft(one);
    EXPECT_TRUE(miss.tokens.empty());
}

TEST(NgramDrafter, MapKeysDraftAsManyAsWereLastAccepted) {
    common_params_speculative p = kinds({COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K});
    p.ngram_map_k.size_n = 2;
    p.ngram_map_k.size_m = 2;
    NgramDrafter d(p, 1);
    EXPECT_EQ(d.n_max(), 2);
    const Tokens prompt = {0, 5, 1, 2, 3, 4, 9, 9, 9, 1};
    d.begin(0, prompt);
    Tokens t = prompt;
    t.push_back(2);
    EXPECT_EQ(propose(d, t, 8), (Tokens{3, 4}));
    // One of the two was confirmed: the key's next proposal holds one.
    d.accept(0, 1);
    t.insert(t.end(), {3, 8, 8, 1, 2});
    EXPECT_EQ(propose(d, t, 8), (Tokens{3}));
}

TEST(NgramDrafter, ASlotWhoseTokensShrankStartsAgain) {
    common_params_speculative p = kinds({COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K});
    p.ngram_map_k.size_n = 2;
    p.ngram_map_k.size_m = 2;
    NgramDrafter d(p, 1);
    const Tokens long_history = {0, 5, 1, 2, 3, 4, 9, 9, 9, 9, 9, 9, 9, 1, 2};
    EXPECT_EQ(propose(d, long_history, 8), (Tokens{3, 4}));
    // A context shift dropped tokens: libcommon's map would stop the process
    // if it were asked without a new begin.
    EXPECT_EQ(propose(d, {0, 6, 1, 2, 7, 8, 9, 1, 2}, 8), (Tokens{7, 8}));
}

TEST(NgramDrafter, ModDraftsFromThePromptsNgrams) {
    common_params_speculative p = kinds({COMMON_SPECULATIVE_TYPE_NGRAM_MOD});
    p.ngram_mod.n_match = 2;
    p.ngram_mod.n_max = 3;
    p.ngram_mod.n_min = 1;
    NgramDrafter d(p, 1);
    EXPECT_EQ(d.n_max(), 3);
    const Tokens prompt = {1, 2, 3, 4, 5, 9, 9};
    d.begin(0, prompt);
    Tokens t = prompt;
    t.insert(t.end(), {1, 2});
    EXPECT_EQ(propose(d, t, 8), (Tokens{3, 4, 5}));
    EXPECT_EQ(propose(d, t, 2), (Tokens{3, 4}));
}

TEST(NgramDrafter, KindsTakeTurnsInLlamaServersOrder) {
    common_params_speculative p = kinds({COMMON_SPECULATIVE_TYPE_NGRAM_MOD, COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE});
    p.ngram_simple.size_n = 2;
    p.ngram_simple.size_m = 2;
    p.ngram_mod.n_match = 2;
    p.ngram_mod.n_max = 3;
    p.ngram_mod.n_min = 1;
    NgramDrafter d(p, 1);
    EXPECT_STREQ(d.name(), "ngram-mod,ngram-simple");
    EXPECT_EQ(d.n_max(), 3);
    // Both have a proposal: ngram-simple's (two tokens) goes first, as in llama-server.
    const Tokens prompt = {0, 1, 2, 3, 4, 5, 6};
    d.begin(0, prompt);
    EXPECT_EQ(propose(d, {0, 1, 2, 3, 4, 5, 6, 1, 2}, 8), (Tokens{3, 4}));
    // ngram-simple finds too few tokens here; ngram-mod drafts.
    NgramDrafter again(p, 1);
    const Tokens short_prompt = {1, 2, 3, 4, 5, 9, 9};
    again.begin(0, short_prompt);
    EXPECT_EQ(propose(again, {1, 2, 3, 4, 5, 9, 9, 1, 2}, 8), (Tokens{3, 4, 5}));
}

TEST(NgramDrafter, CacheReadsTheStaticLookupFile) {
    const std::string path = ::testing::TempDir() + "ngram-static.bin";
    common_ngram_cache cache;
    Tokens text;
    for (int i = 0; i < 20; ++i) text.insert(text.end(), {10, 11, 12, 13, 14, 15});
    common_ngram_cache_update(cache, LLAMA_NGRAM_STATIC, LLAMA_NGRAM_STATIC, text, (int) text.size(), false);
    common_ngram_cache_save(cache, path);

    const Tokens history = {3, 4, 5, 6, 10, 11};
    common_params_speculative p = kinds({COMMON_SPECULATIVE_TYPE_NGRAM_CACHE});
    NgramDrafter without(p, 1);
    EXPECT_TRUE(propose(without, history, 8).empty());
    p.ngram_cache.lookup_cache_static = path;
    NgramDrafter with(p, 1);
    const Tokens proposal = propose(with, history, 8);
    ASSERT_FALSE(proposal.empty());
    EXPECT_EQ(proposal[0], 12);
    std::remove(path.c_str());
}

TEST(NgramDrafter, AnUnreadableLookupFileIsAnErrorNamingIt) {
    common_params_speculative p = kinds({COMMON_SPECULATIVE_TYPE_NGRAM_CACHE});
    p.ngram_cache.lookup_cache_dynamic = "/nonexistent/dynamic.bin";
    try {
        NgramDrafter d(p, 1);
        FAIL() << "no error";
    } catch (const llama_tp::Error & e) {
        EXPECT_NE(std::string(e.what()).find("--lookup-cache-dynamic /nonexistent/dynamic.bin"), std::string::npos)
            << e.what();
    }
    EXPECT_THROW(NgramDrafter(kinds({COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE}), 1), llama_tp::Error);
}

}  // namespace
