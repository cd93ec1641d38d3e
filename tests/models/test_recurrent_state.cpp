// Linear attention's recurrent state through the engine, on a generated
// qwen35 model in F32: a prompt in chunks, several sequences in one batch,
// copies, images taken at one split and loaded at another, and what a
// removal leaves. Usage: test-recurrent-state MODEL.gguf (gtest flags may
// follow).

#include "runtime/engine.h"
#include "runtime/error.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace llama_tp {
namespace {

std::string g_model;

std::unique_ptr<Engine> load(int tp = 1, bool exact = true) {
    EngineOptions o;
    o.model_path = g_model;
    o.n_ctx = 1024;
    o.n_seq_max = 4;
    o.n_batch = 256;
    o.n_threads = 2;
    o.tp = tp;
    o.split_invariant = exact;
    o.progress = false;
    return Engine::load(o);
}

std::vector<int32_t> tokens(int n, int salt = 0) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(1 + (i * 7919 + salt * 104729) % 3000);
    return t;
}

using Logits = std::vector<float>;

// Decodes t[from, to) of a sequence in chunks of `chunk`; returns the logits
// of the last token.
Logits decode(Engine & e, const std::vector<int32_t> & t, int seq, int from, int to, int chunk) {
    Logits last;
    for (int start = from; start < to; start += chunk) {
        const int end = std::min(to, start + chunk);
        Batch b;
        for (int i = start; i < end; ++i) b.add(t[i], i, seq, i + 1 == end);
        e.decode(b);
        const float * l = e.logits(end - start - 1);
        last.assign(l, l + e.info().n_vocab);
    }
    return last;
}

float max_diff(const Logits & a, const Logits & b) {
    EXPECT_EQ(a.size(), b.size());
    float m = 0.0f;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

TEST(RecurrentState, APromptInChunksGivesTheWholePromptsLogits) {
    auto e = load();
    const auto t = tokens(200);
    const Logits whole = decode(*e, t, 0, 0, 200, 200);
    // Other chunk sizes multiply other numbers of rows at once: the same up
    // to ggml's float kernels, which a state carries along.
    EXPECT_LT(max_diff(decode(*e, t, 1, 0, 200, 37), whole), 1e-3f);
    EXPECT_LT(max_diff(decode(*e, t, 2, 0, 200, 1), whole), 1e-3f);
}

TEST(RecurrentState, SequencesInOneBatchKeepTheirOwnStates) {
    auto e = load();
    const std::vector<std::vector<int32_t>> t = {tokens(60, 1), tokens(60, 2), tokens(60, 3)};
    // Alone, one at a time.
    std::vector<Logits> alone;
    for (int s = 0; s < 3; ++s) alone.push_back(decode(*e, t[s], s, 0, 60, 20));
    for (int s = 0; s < 3; ++s) e->seq_remove(s, 0, -1);
    // Together: prompts of different lengths in one batch, then decode
    // steps of one token each (one run of three sequences).
    Batch b;
    for (int s = 0; s < 3; ++s) {
        for (int i = 0; i < 40 + 5 * s; ++i) b.add(t[s][i], i, s, false);
    }
    e->decode(b);
    for (int i = 40; i < 60; ++i) {
        Batch step;
        for (int s = 0; s < 3; ++s) {
            if (i >= 40 + 5 * s) step.add(t[s][i], i, s, i == 59);
        }
        e->decode(step);
    }
    for (int s = 0; s < 3; ++s) {
        const float * l = e->logits(s);
        EXPECT_LT(max_diff(Logits(l, l + e->info().n_vocab), alone[s]), 1e-3f) << "sequence " << s;
    }
}

TEST(RecurrentState, ARemovedTailLosesTheStateUntilTheSequenceStartsAgain) {
    auto e = load();
    const auto t = tokens(80);
    const Logits first = decode(*e, t, 0, 0, 80, 40);
    EXPECT_TRUE(e->seq_resumable(0, 80));
    EXPECT_FALSE(e->seq_resumable(0, 50));
    EXPECT_FALSE(e->image_resumable(80, 50));
    EXPECT_TRUE(e->image_resumable(80, 80));
    e->seq_remove(0, 50, -1);
    EXPECT_FALSE(e->seq_resumable(0, 50));
    try {
        decode(*e, t, 0, 50, 80, 30);
        FAIL() << "decoding on from a lost state must be refused";
    } catch (const Error & err) {
        EXPECT_NE(std::string(err.what()).find("lost"), std::string::npos) << err.what();
    }
    e->seq_remove(0, 0, -1);
    EXPECT_EQ(max_diff(decode(*e, t, 0, 0, 80, 40), first), 0.0f);
}

TEST(RecurrentState, ACopyCarriesTheWholeStateAndNoPrefixOfIt) {
    auto e = load();
    const auto t = tokens(100);
    decode(*e, t, 0, 0, 90, 45);
    EXPECT_FALSE(e->seq_copy(0, 1, 0, 60));  // the state is of all 90 positions
    ASSERT_TRUE(e->seq_copy(0, 1, 0, 90));
    EXPECT_EQ(max_diff(decode(*e, t, 1, 90, 100, 10), decode(*e, t, 0, 90, 100, 10)), 0.0f);
}

TEST(RecurrentState, AnImageCarriesTheStateIntoAnySplit) {
    auto one = load(1), two = load(2);
    const auto t = tokens(120);
    decode(*one, t, 0, 0, 100, 50);
    const std::vector<uint8_t> image = one->read_sequence(0, 100);
    EXPECT_EQ(image.size(), one->sequence_image_bytes(100));
    EXPECT_THROW(one->read_sequence(0, 60), Error);  // the state holds 100 positions
    const Logits expected = decode(*one, t, 0, 100, 120, 20);
    const std::vector<int32_t> prefix(t.begin(), t.begin() + 100);
    one->write_sequence(2, prefix, image);
    EXPECT_EQ(max_diff(decode(*one, t, 2, 100, 120, 20), expected), 0.0f);
    two->write_sequence(1, prefix, image);
    EXPECT_EQ(max_diff(decode(*two, t, 1, 100, 120, 20), expected), 0.0f);  // split-invariant sums
    // And back: an image taken from two ranks loads into one.
    const std::vector<uint8_t> from_two = two->read_sequence(1, 120);
    one->write_sequence(3, t, from_two);
    Batch b;
    b.add(7, 120, 3, true);
    b.add(7, 120, 0, true);
    one->decode(b);
    const float * a = one->logits(0);
    const float * c = one->logits(1);
    EXPECT_EQ(max_diff(Logits(a, a + one->info().n_vocab), Logits(c, c + one->info().n_vocab)), 0.0f);
}

}  // namespace
}  // namespace llama_tp

int main(int argc, char ** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s MODEL.gguf [gtest flags]\n", argv[0]);
        return 2;
    }
    llama_tp::g_model = argv[1];
    return RUN_ALL_TESTS();
}
