// Sliding-window layers keeping only their window (the window pool) against
// the same model keeping every cell (--swa-full): generated sliding-window
// models, prompts long enough that the window pool packs its cells several
// times. Usage: test-window-cache MODEL.gguf (gtest flags may follow).

#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace llama_tp {
namespace {

std::string g_model;

constexpr int kBatch = 16;  // small, so that the window pool is much smaller than the context

std::unique_ptr<Engine> load(bool swa_full, bool unified = false, int tp = 1, bool exact = false) {
    EngineOptions o;
    o.model_path = g_model;
    o.n_ctx = 4096;
    o.n_seq_max = 2;
    o.n_batch = kBatch;
    o.n_threads = 2;
    o.kv_unified = unified;
    o.swa_full = swa_full;
    o.tp = tp;
    if (exact) o.split_invariant = true;
    o.progress = false;
    return Engine::load(o);
}

std::vector<int32_t> tokens(int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(1 + (i * 7919) % 3000);
    return t;
}

// Decodes t[from, to) at positions from.. of a sequence, kBatch at a time,
// and returns the logits of the last token of every batch.
std::vector<std::vector<float>> decode(Engine & e, const std::vector<int32_t> & t, int seq, int from, int to) {
    std::vector<std::vector<float>> out;
    for (int start = from; start < to; start += kBatch) {
        const int end = std::min(to, start + kBatch);
        Batch b;
        for (int i = start; i < end; ++i) b.add(t[i], i, seq, i + 1 == end);
        e.decode(b);
        const float * l = e.logits(end - start - 1);
        out.emplace_back(l, l + e.info().n_vocab);
    }
    return out;
}

float max_diff(const std::vector<std::vector<float>> & a, const std::vector<std::vector<float>> & b) {
    EXPECT_EQ(a.size(), b.size());
    float m = 0.0f;
    for (size_t r = 0; r < std::min(a.size(), b.size()); ++r) {
        for (size_t i = 0; i < a[r].size(); ++i) m = std::max(m, std::fabs(a[r][i] - b[r][i]));
    }
    return m;
}

TEST(WindowCache, KeepsLessMemoryAndGivesTheFullCachesNumbers) {
    auto window = load(false), full = load(true);
    EXPECT_LT(window->rank_memory_bytes()[0], full->rank_memory_bytes()[0]);
    const auto t = tokens(1500);  // the window pool holds 512 cells per sequence
    EXPECT_EQ(max_diff(decode(*window, t, 0, 0, 1500), decode(*full, t, 0, 0, 1500)), 0.0f);
}

TEST(WindowCache, OneSharedPoolGivesTheFullCachesNumbers) {
    auto window = load(false, /*unified =*/true), full = load(true, true);
    const auto t = tokens(1200);
    EXPECT_EQ(max_diff(decode(*window, t, 1, 0, 1200), decode(*full, t, 1, 0, 1200)), 0.0f);
}

TEST(WindowCache, SplitAcrossRanksGivesOneRanksNumbers) {
    auto two = load(false, false, 2, /*exact =*/true), one = load(false, false, 1, true);
    const auto t = tokens(900);
    EXPECT_EQ(max_diff(decode(*two, t, 0, 0, 900), decode(*one, t, 0, 0, 900)), 0.0f);
}

TEST(WindowCache, APrefixWhoseWindowIsGoneIsNotResumable) {
    auto e = load(false);
    const auto t = tokens(1000);
    decode(*e, t, 0, 0, 1000);
    EXPECT_TRUE(e->seq_resumable(0, 1000));
    EXPECT_TRUE(e->seq_resumable(0, 995));
    EXPECT_FALSE(e->seq_resumable(0, 100));
    EXPECT_FALSE(e->seq_copy(0, 1, 0, 100));  // the window before position 100 is gone
    EXPECT_EQ(e->seq_pos_max(1), -1);
    EXPECT_TRUE(e->seq_copy(0, 1, 0, 1000));
    EXPECT_EQ(e->seq_pos_max(1), 999);
}

TEST(WindowCache, AnImageResumesWhereTheSequenceWrittenFromItDoes) {
    auto e = load(false);
    const auto t = tokens(1000);
    decode(*e, t, 0, 0, 1000);
    const std::vector<uint8_t> image = e->read_sequence(0, 1000);
    EXPECT_EQ(image.size(), e->sequence_image_bytes(1000));
    for (int32_t m : {0, 1, 10, 100, 500, 990, 999, 1000}) {
        e->write_sequence(1, t, image);
        EXPECT_EQ(e->image_resumable(1000, m), e->seq_resumable(1, m)) << "at " << m;
    }
    EXPECT_FALSE(e->image_resumable(1000, 100));
    EXPECT_TRUE(e->image_resumable(1000, 1000));
    auto full = load(true);
    EXPECT_TRUE(full->image_resumable(1000, 100));
}

TEST(WindowCache, CopiesAndImagesContinueAsTheOriginal) {
    auto e = load(false);
    auto t = tokens(1100);
    decode(*e, t, 0, 0, 1000);
    const std::vector<uint8_t> image = e->read_sequence(0, 1000);
    std::vector<int32_t> prefix(t.begin(), t.begin() + 1000);

    e->seq_remove(1, 0, -1);
    ASSERT_TRUE(e->seq_copy(0, 1, 0, 1000));
    const auto copied = decode(*e, t, 1, 1000, 1100);
    const auto original = decode(*e, t, 0, 1000, 1100);
    EXPECT_EQ(max_diff(copied, original), 0.0f);

    e->write_sequence(1, prefix, image);
    EXPECT_EQ(e->seq_pos_max(1), 999);
    EXPECT_EQ(max_diff(decode(*e, t, 1, 1000, 1100), original), 0.0f);
}

TEST(WindowCache, AnImageOfEveryCellLoadsIntoWindowsNotTheOtherWay) {
    auto window = load(false), full = load(true);
    const auto t = tokens(700);
    decode(*full, t, 0, 0, 600);
    const std::vector<int32_t> prefix(t.begin(), t.begin() + 600);
    const std::vector<uint8_t> every_cell = full->read_sequence(0, 600);
    window->write_sequence(0, prefix, every_cell);
    EXPECT_EQ(max_diff(decode(*window, t, 0, 600, 700), decode(*full, t, 0, 600, 700)), 0.0f);

    const std::vector<uint8_t> windows = window->read_sequence(0, 700);
    EXPECT_LT(windows.size(), full->read_sequence(0, 700).size());
    try {
        full->write_sequence(1, std::vector<int32_t>(t.begin(), t.end()), windows);
        FAIL() << "an image of windows loaded into a cache of every cell";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("--swa-full"), std::string::npos) << e.what();
    }
    EXPECT_EQ(full->seq_pos_max(1), -1);
}

TEST(WindowCache, AContextShiftKeepsTheWindow) {
    auto window = load(false), full = load(true);
    const auto t = tokens(1300);
    for (Engine * e : {window.get(), full.get()}) {
        decode(*e, t, 0, 0, 1200);
        e->seq_remove(0, 100, 600);
        e->seq_shift(0, 600, -1, -500);
    }
    std::vector<int32_t> rest(t.begin() + 1200, t.end());
    rest.insert(rest.begin(), 700, 0);  // decoded at positions 700..799
    // The full cache refills the removed cells out of order: the same
    // attention, added in another order.
    EXPECT_LT(max_diff(decode(*window, rest, 0, 700, 800), decode(*full, rest, 0, 700, 800)), 1e-3f);
}

}  // namespace
}  // namespace llama_tp

int main(int argc, char ** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    if (argc < 2) {
        std::fprintf(stderr, "usage: test-window-cache MODEL.gguf\n");
        return 2;
    }
    llama_tp::g_model = argv[1];
    return RUN_ALL_TESTS();
}
