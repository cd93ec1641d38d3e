#include "runtime/engine.h"

#include "runtime/error.h"
#include "runtime/model/gguf_file.h"
#include "runtime/model/hparams.h"
#include "runtime/kv/kv_image.h"
#include "runtime/shard/shard_plan.h"
#include "runtime/text/sampler.h"
#include "runtime/text/tokenizer.h"

#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

namespace llama_tp {
namespace {

std::unique_ptr<Engine> load_test_model(int n_seq = 4, int n_ctx = 512, int tp = 1) {
    EngineOptions o;
    o.model_path = LLAMA_TP_TEST_MODEL;
    o.n_seq_max = n_seq;
    o.n_ctx = n_ctx;
    o.n_threads = 2;
    o.tp = tp;
    return Engine::load(o);
}

std::vector<float> row(const Engine & e, int i) {
    const float * l = e.logits(i);
    return std::vector<float>(l, l + e.info().n_vocab);
}

float max_abs_diff(const std::vector<float> & a, const std::vector<float> & b) {
    float m = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

TEST(Engine, ReportsModelInfo) {
    auto e = load_test_model();
    EXPECT_EQ(e->info().architecture, "llama");
    EXPECT_EQ(e->info().n_vocab, 512);
    EXPECT_EQ(e->info().n_layer, 5);
    EXPECT_EQ(e->info().n_embd_kv, 5 * 4 * 8);  // 5 layers of 4 KV heads of 8
    EXPECT_GT(e->info().n_params, 200000);
}

TEST(Engine, SequencesInOneBatchMatchSequencesAlone) {
    auto e = load_test_model();
    const auto a = e->tokenizer().tokenize("Once upon a time", true, false);
    const auto b = e->tokenizer().tokenize("The dog ran to the park and", true, false);

    Batch alone;
    for (size_t i = 0; i < b.size(); ++i) alone.add(b[i], (int) i, 0, i + 1 == b.size());
    e->decode(alone);
    const auto expected = row(*e, (int) b.size() - 1);
    e->seq_remove(0, 0, -1);

    Batch mixed;
    for (size_t i = 0; i < a.size(); ++i) mixed.add(a[i], (int) i, 1, false);
    for (size_t i = 0; i < b.size(); ++i) mixed.add(b[i], (int) i, 3, i + 1 == b.size());
    e->decode(mixed);
    EXPECT_LT(max_abs_diff(expected, row(*e, mixed.size() - 1)), 1e-4f);
}

size_t argmax(const std::vector<float> & v) {
    return (size_t) (std::max_element(v.begin(), v.end()) - v.begin());
}

// Greedy steps of sequence 0, alone or with sequence 1 in every batch: the
// logits of each of sequence 0's steps.
std::vector<std::vector<float>> greedy_steps(Engine & e, bool with_companion, int n_steps) {
    const auto p = e.tokenizer().tokenize("Once upon a time there was a little girl", true, false);
    const auto q = e.tokenizer().tokenize("The big brown dog ran", true, false);
    Batch b;
    for (size_t i = 0; i < p.size(); ++i) b.add(p[i], (int) i, 0, i + 1 == p.size());
    if (with_companion) {
        for (size_t i = 0; i < q.size(); ++i) b.add(q[i], (int) i, 1, i + 1 == q.size());
    }
    e.decode(b);
    std::vector<std::vector<float>> out{row(e, (int) p.size() - 1)};
    int32_t pos0 = (int32_t) p.size(), pos1 = (int32_t) q.size();
    int32_t row1 = b.size() - 1;
    for (int step = 0; step < n_steps; ++step) {
        const auto & last = out.back();
        const int32_t tok = (int32_t) (std::max_element(last.begin(), last.end()) - last.begin());
        Batch d;
        d.add(tok, pos0++, 0, true);
        if (with_companion) {
            const float * l1 = e.logits(row1);
            d.add((int32_t) (std::max_element(l1, l1 + e.info().n_vocab) - l1), pos1++, 1, true);
            row1 = 1;
        }
        e.decode(d);
        out.push_back(row(e, 0));
    }
    return out;
}

// Attention reads only the sequence's own cells, so a companion in the batch
// changes a sequence's logits only through the matrix kernels' rounding
// (which differs with the number of rows, 2e-6 here, and grows through the F16
// cache); never through attending to the companion.
TEST(Engine, ABatchCompanionChangesASequenceOnlyByRounding) {
    auto alone = load_test_model();
    auto batched = load_test_model();
    const auto a = greedy_steps(*alone, false, 12);
    const auto b = greedy_steps(*batched, true, 12);
    EXPECT_LT(max_abs_diff(a[0], b[0]), 1e-5f);
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_LT(max_abs_diff(a[i], b[i]), 2e-2f) << "step " << i;
        EXPECT_EQ(argmax(a[i]), argmax(b[i])) << "step " << i;
    }
}

TEST(Engine, PerSequenceAndUnifiedCacheLayoutsAgree) {
    EngineOptions o;
    o.model_path = LLAMA_TP_TEST_MODEL;
    o.n_seq_max = 4;
    o.n_ctx = 512;
    o.n_threads = 2;
    auto per_seq = Engine::load(o);
    o.kv_unified = true;
    auto unified = Engine::load(o);
    const auto a = greedy_steps(*per_seq, true, 12);
    const auto b = greedy_steps(*unified, true, 12);
    // The layouts differ in how attention sums its values: F32 in ggml-ext's
    // row attention (per-sequence regions), F16 in ggml's kernel (shared pool).
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_LT(max_abs_diff(a[i], b[i]), 2e-2f) << "step " << i;
        EXPECT_EQ(argmax(a[i]), argmax(b[i])) << "step " << i;
    }
}

TEST(Engine, DecodeStepsOfOneShapeReuseTheGraph) {
    auto e = load_test_model();
    const auto p = e->tokenizer().tokenize("Lily liked to", true, false);
    Batch b;
    for (size_t i = 0; i < p.size(); ++i) b.add(p[i], (int) i, 0, i + 1 == p.size());
    e->decode(b);
    int32_t pos = (int32_t) p.size();
    int32_t tok =
        (int32_t) (std::max_element(e->logits(b.size() - 1), e->logits(b.size() - 1) + 512) - e->logits(b.size() - 1));
    b.clear();
    b.add(tok, pos++, 0, true);
    e->decode(b);
    const int64_t builds = e->graph_builds();
    for (int step = 0; step < 20; ++step) {
        tok = (int32_t) (std::max_element(e->logits(0), e->logits(0) + 512) - e->logits(0));
        b.clear();
        b.add(tok, pos++, 0, true);
        e->decode(b);
    }
    EXPECT_EQ(e->graph_builds(), builds);
}

TEST(Engine, RemovingATailAndRedecodingGivesTheSameLogits) {
    auto e = load_test_model();
    const auto p = e->tokenizer().tokenize("The sun was shining and the sky", true, false);
    Batch b;
    for (size_t i = 0; i < p.size(); ++i) b.add(p[i], (int) i, 2, i + 1 == p.size());
    e->decode(b);
    const auto first = row(*e, b.size() - 1);
    e->seq_remove(2, (int) p.size() - 3, -1);
    EXPECT_EQ(e->seq_pos_max(2), (int) p.size() - 4);
    Batch tail;
    for (size_t i = p.size() - 3; i < p.size(); ++i) tail.add(p[i], (int) i, 2, i + 1 == p.size());
    e->decode(tail);
    EXPECT_LT(max_abs_diff(first, row(*e, tail.size() - 1)), 1e-4f);
}

// Asleep, the engine holds no ranks: steps are refused and the cells are
// gone; awake again, it loads them and answers as before, its statistics
// counted on.
TEST(TensorParallelEngine, SleepsAndWakesWithTheSameAnswers) {
    auto e = load_test_model(2, 256, 2);
    const auto p = e->tokenizer().tokenize("The sun was shining and the sky", true, false);
    Batch b;
    for (size_t i = 0; i < p.size(); ++i) b.add(p[i], (int) i, 1, i + 1 == p.size());
    e->decode(b);
    const auto before = row(*e, b.size() - 1);
    const auto calls = e->collective_stats().at(0).calls;
    ASSERT_GT(calls, 0);
    EXPECT_FALSE(e->asleep());
    e->sleep();
    EXPECT_TRUE(e->asleep());
    EXPECT_EQ(e->failure(), "");
    EXPECT_EQ(e->seq_pos_max(1), -1);
    EXPECT_EQ(e->rank_memory_bytes(), (std::vector<uint64_t>{0, 0}));
    EXPECT_EQ(e->collective_stats().at(0).calls, calls);
    EXPECT_THROW(e->decode(b), Error);
    EXPECT_THROW(e->read_sequence(1, 1), Error);
    EXPECT_EQ(e->tokenizer().tokenize("The sun was shining and the sky", true, false), p);  // still there
    e->wake();
    EXPECT_FALSE(e->asleep());
    EXPECT_GT(e->rank_memory_bytes().at(1), 0u);
    e->decode(b);
    EXPECT_EQ(max_abs_diff(before, row(*e, b.size() - 1)), 0.0f);
    EXPECT_GT(e->collective_stats().at(0).calls, calls);
}

// A prompt copied from another sequence continues as if computed there: the
// copied cells hold the same keys and values in the same order, so the last
// prompt token decoded after the copy gives the same bits as after the same
// prompt decoded in place (and its last token decoded again alone).
void check_copied_prompt(int tp) {
    auto e = load_test_model(4, 512, tp);
    const auto p = e->tokenizer().tokenize("Once upon a time there was a little dog named", true, false);
    const int n = (int) p.size();
    auto last_alone = [&](int seq) {
        Batch tail;
        tail.add(p[n - 1], n - 1, seq, true);
        e->decode(tail);
        return row(*e, 0);
    };
    Batch b;
    for (int i = 0; i < n; ++i) b.add(p[i], i, 0, false);
    for (int i = 0; i < n; ++i) b.add(p[i], i, 2, false);
    e->decode(b);
    e->seq_remove(2, n - 1, -1);
    const std::vector<float> in_place = last_alone(2);
    ASSERT_TRUE(e->seq_copy(0, 1, 0, n - 1));
    EXPECT_EQ(e->seq_pos_max(1), n - 2);
    const std::vector<float> copied = last_alone(1);
    EXPECT_EQ(in_place, copied);
    EXPECT_EQ(e->seq_pos_max(0), n - 1);  // the source keeps its cells
}

TEST(Engine, ACopiedPromptContinuesAsIfComputedInPlace) {
    check_copied_prompt(1);
}

TEST(TensorParallelEngine, EveryRankCopiesItsCellsOfAPrompt) {
    check_copied_prompt(2);
}

TEST(Engine, ACopyThatDoesNotFitChangesNothing) {
    auto e = load_test_model(4, 512);  // 128 cells a sequence
    Batch b;
    for (int i = 0; i < 100; ++i) b.add(1 + i, i, 0, i == 99);
    for (int i = 0; i < 60; ++i) b.add(1 + i, i, 3, i == 59);
    e->decode(b);
    const int free_before = e->n_free_cells();
    EXPECT_FALSE(e->seq_copy(0, 3, 0, -1));
    EXPECT_EQ(e->seq_pos_max(3), 59);
    EXPECT_EQ(e->n_free_cells(), free_before);
    EXPECT_FALSE(e->seq_copy(0, 0, 0, -1));  // onto itself
    EXPECT_TRUE(e->seq_copy(0, 3, 60, -1));  // positions 60..99 join 0..59
    EXPECT_EQ(e->seq_pos_max(3), 99);
    Batch next;
    next.add(7, 100, 3, true);
    e->decode(next);  // every rank applied the copy before placing this
    EXPECT_EQ(e->seq_pos_max(3), 100);
}

// A context shift rotates the moved keys. Layer 0's keys depend on their
// token and position alone, so after dropping the first k tokens and moving
// the rest back by k they must be those of the remaining tokens decoded at
// the new positions, to within the rounding of one rotation.
void decode_at(Engine & e, const std::vector<int32_t> & p, int seq, int first) {
    Batch b;
    for (size_t i = 0; i < p.size(); ++i) b.add(p[i], first + (int) i, seq, i + 1 == p.size());
    e.decode(b);
}

// Layer 0's keys of cells [first, first + n) of a sequence read as an image.
std::vector<float> layer0_keys(Engine & e, int seq, int n_cached, int first, int n) {
    const std::vector<uint8_t> image = e.read_sequence(seq, n_cached);
    const KvImageLayout l =
        KvImageLayout::of(read_hparams(GgufFile(e.options().model_path)), e.options().kv_types, n_cached, -1);
    const auto * h = reinterpret_cast<const ggml_fp16_t *>(image.data() + l.offset(0, false, first, 0));
    std::vector<float> out((size_t) n * l.layers[0].k_row_bytes() / sizeof(ggml_fp16_t));
    for (size_t i = 0; i < out.size(); ++i) out[i] = ggml_fp16_to_fp32(h[i]);
    return out;
}

void check_shift(int tp) {
    auto e = load_test_model(4, 512, tp);
    const auto p = e->tokenizer().tokenize("The sun was shining and the sky was blue over the hill", true, false);
    const int n = (int) p.size(), k = 5;
    const std::vector<int32_t> rest(p.begin() + k, p.end());

    decode_at(*e, p, 0, 0);
    e->seq_remove(0, 0, k);
    e->seq_shift(0, k, -1, -k);
    EXPECT_EQ(e->seq_pos_max(0), n - k - 1);
    decode_at(*e, rest, 1, 0);  // the remaining tokens at their new positions
    decode_at(*e, p, 2, 0);     // unshifted
    const std::vector<float> shifted = layer0_keys(*e, 0, n - k, 0, n - k);
    const std::vector<float> fresh = layer0_keys(*e, 1, n - k, 0, n - k);
    const std::vector<float> unrotated = layer0_keys(*e, 2, n, k, n - k);
    // A few F16 steps at the largest key's magnitude.
    float largest = 0.0f;
    for (float x : fresh) largest = std::max(largest, std::fabs(x));
    const float ulp = std::ldexp(1.0f, std::ilogb(largest) - 10);
    const float err = max_abs_diff(shifted, fresh);
    EXPECT_LE(err, 4 * ulp) << "tp " << tp;
    EXPECT_GT(max_abs_diff(unrotated, fresh), 20 * std::max(err, ulp)) << "tp " << tp;

    // There and back: the keys come back to within rounding.
    e->seq_shift(2, 0, -1, 100);
    e->seq_shift(2, 0, -1, -100);
    decode_at(*e, {p.back()}, 2, n);  // a step carries the edits to the ranks
    EXPECT_LE(max_abs_diff(layer0_keys(*e, 2, n, k, n - k), unrotated), 4 * ulp) << "tp " << tp;
}

TEST(Engine, AContextShiftRotatesTheMovedKeys) {
    check_shift(1);
    check_shift(2);
}

TEST(Engine, AShiftBelowPositionZeroRemovesTheCells) {
    auto e = load_test_model();
    Batch b;
    for (int i = 0; i < 10; ++i) b.add(1 + i, i, 0, i == 9);
    e->decode(b);
    const int32_t free = e->n_free_cells();
    e->seq_remove(0, 0, 4);
    e->seq_shift(0, 4, -1, -6);  // positions 4 and 5 would go below 0
    EXPECT_EQ(e->seq_pos_max(0), 3);
    EXPECT_EQ(e->n_free_cells(), free + 6);
}

TEST(Engine, BadBatchesAreErrorsAndLeaveTheCacheAlone) {
    auto e = load_test_model(2, 64);
    const int32_t free_before = e->n_free_cells();
    Batch bad_token;
    bad_token.add(512, 0, 0, true);
    EXPECT_THROW(e->decode(bad_token), Error);
    Batch bad_seq;
    bad_seq.add(1, 0, 2, true);
    EXPECT_THROW(e->decode(bad_seq), Error);
    EXPECT_THROW(e->decode(Batch{}), Error);
    Batch too_big;
    for (int i = 0; i < 65; ++i) too_big.add(1, i, 0, false);
    EXPECT_THROW(e->decode(too_big), Error);
    EXPECT_EQ(e->n_free_cells(), free_before);
    EXPECT_EQ(e->seq_pos_max(0), -1);
}

TEST(Engine, LogitsOfRowsNotAskedForAreAnError) {
    auto e = load_test_model();
    Batch b;
    b.add(1, 0, 0, false);
    b.add(2, 1, 0, true);
    e->decode(b);
    EXPECT_THROW(e->logits(0), Error);
    EXPECT_NO_THROW(e->logits(1));
}

}  // namespace
}  // namespace llama_tp

namespace llama_tp {
namespace {

TEST(TensorParallelEngine, DecodeStepsReuseEachRanksGraphAndMatchOneDevice) {
    EngineOptions o;
    o.model_path = LLAMA_TP_TEST_MODEL;
    o.n_ctx = 256;
    o.n_threads = 2;
    auto one = Engine::load(o);
    o.tp = 2;
    auto two = Engine::load(o);
    EXPECT_EQ(two->info().tp, 2);
    EXPECT_EQ(two->info().allreduce, "cpu");

    const auto p = one->tokenizer().tokenize("Once upon a time there was", true, false);
    Batch b;
    for (size_t i = 0; i < p.size(); ++i) b.add(p[i], (int) i, 0, i + 1 == p.size());
    one->decode(b);
    two->decode(b);
    int32_t pos = (int32_t) p.size();
    int64_t builds = -1;
    for (int step = 0; step < 12; ++step) {
        const int row = step == 0 ? b.size() - 1 : 0;
        EXPECT_LT(max_abs_diff(std::vector<float>(one->logits(row), one->logits(row) + 512),
                               std::vector<float>(two->logits(row), two->logits(row) + 512)),
                  5e-3f);  // raw logits of magnitude ~10; the compare tool judges probabilities
        const int32_t tok = (int32_t) (std::max_element(one->logits(row), one->logits(row) + 512) - one->logits(row));
        b.clear();
        b.add(tok, pos++, 0, true);
        one->decode(b);
        two->decode(b);
        if (step == 1) builds = two->graph_builds();
    }
    EXPECT_EQ(two->graph_builds(), builds) << "steady-state decode builds nothing";
}

TEST(TensorParallelEngine, RefusesASplitTheModelCannotTake) {
    EngineOptions o;
    o.model_path = LLAMA_TP_TEST_MODEL;
    o.n_ctx = 64;
    o.tp = 16;  // 8 heads
    try {
        Engine::load(o);
        FAIL() << "loaded";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("cannot split"), std::string::npos) << e.what();
    }
    o.tp = 2;
    o.tensor_split = {1, 1, 1};
    EXPECT_THROW(Engine::load(o), Error);
}

// Pieces tile a range exactly, in order.
void expect_tiles(const std::vector<ShardRange> & pieces, const ShardRange & range) {
    ASSERT_FALSE(pieces.empty());
    EXPECT_EQ(pieces.front().begin, range.begin);
    EXPECT_EQ(pieces.back().end, range.end);
    for (size_t i = 1; i < pieces.size(); ++i) EXPECT_EQ(pieces[i].begin, pieces[i - 1].end);
}

bool is_cell_of(const ShardRange & piece, const std::vector<ShardRange> & grid) {
    return std::any_of(grid.begin(), grid.end(),
                       [&](const ShardRange & g) { return g.begin == piece.begin && g.end == piece.end; });
}

// With split-invariant sums every split's pieces are cells of the one grid a
// single device uses; without them each rank has one piece, its range.
std::unique_ptr<Engine> load_tp(int tp, int n_seq, bool unified = false) {
    EngineOptions o;
    o.model_path = LLAMA_TP_TEST_MODEL;
    o.n_seq_max = n_seq;
    o.n_ctx = 256 * n_seq;
    o.n_threads = 2;
    o.tp = tp;
    o.kv_unified = unified;
    return Engine::load(o);
}

// Decodes tokens [from, to) of a sequence, logits of the last.
std::vector<float> decode_range(Engine & e, const std::vector<int32_t> & t, int from, int to, int seq) {
    Batch b;
    for (int i = from; i < to; ++i) b.add(t[i], i, seq, i + 1 == to);
    e.decode(b);
    return row(e, to - from - 1);
}

TEST(TensorParallelEngine, ASequenceReadAtOneSplitLoadsIntoAnother) {
    auto tp2 = load_tp(2, 2);
    const auto t = tp2->tokenizer().tokenize("Once upon a time there was a little dog", true, false);
    const int n = (int) t.size() - 1;
    decode_range(*tp2, t, 0, n, 1);
    const std::vector<uint8_t> image = tp2->read_sequence(1, n);
    // The whole model's heads: 5 layers x (K + V) x n cells x 4 heads x 8 F16 values.
    EXPECT_EQ(image.size(), (size_t) 5 * 2 * n * 4 * 8 * 2);
    const std::vector<float> next2 = decode_range(*tp2, t, n, n + 1, 1);

    for (bool unified : {false, true}) {
        auto one = load_tp(1, 3, unified);
        const std::vector<float> own = (decode_range(*one, t, 0, n, 0), decode_range(*one, t, n, n + 1, 0));
        one->write_sequence(2, std::vector<int32_t>(t.begin(), t.begin() + n), image);
        EXPECT_EQ(one->seq_pos_max(2), n - 1);
        const std::vector<float> loaded = decode_range(*one, t, n, n + 1, 2);
        // The cells came from two ranks' sums: the same up to their rounding;
        // the shared pool attends with ggml's kernel (F16 sums), the image came
        // from row attention, so there they agree to that kernel's rounding.
        const float bound = unified ? 2e-2f : 1e-3f;
        EXPECT_LT(max_abs_diff(loaded, own), bound);
        EXPECT_LT(max_abs_diff(loaded, next2), bound);
        EXPECT_EQ(std::max_element(loaded.begin(), loaded.end()) - loaded.begin(),
                  std::max_element(own.begin(), own.end()) - own.begin());
        // Read back from the loading engine: the very bytes it was given.
        EXPECT_EQ(one->read_sequence(2, n), image);
    }
    auto tp4 = load_tp(4, 1);
    tp4->write_sequence(0, std::vector<int32_t>(t.begin(), t.begin() + n), image);
    EXPECT_LT(max_abs_diff(decode_range(*tp4, t, n, n + 1, 0), next2), 1e-3f);
}

TEST(TensorParallelEngine, EmbeddingsAreTheSameFromOneRankAndFromTwo) {
    std::vector<std::vector<float>> rows;
    for (int tp : {1, 2}) {
        EngineOptions o;
        o.model_path = LLAMA_TP_TEST_MODEL;
        o.n_ctx = 256;
        o.n_threads = 2;
        o.tp = tp;
        o.embeddings = true;
        auto e = Engine::load(o);
        const auto t = e->tokenizer().tokenize("Once upon a time", true, false);
        Batch b;
        for (size_t i = 0; i < t.size(); ++i) b.add(t[i], (int) i, 0, true);
        e->decode(b);
        EXPECT_THROW(e->logits(0), Error);
        const float * h = e->embedding((int) t.size() - 1);
        rows.emplace_back(h, h + e->info().n_embd);
    }
    EXPECT_LT(max_abs_diff(rows[0], rows[1]), 1e-3f);
    float norm = 0.0f;
    for (float v : rows[0]) norm += v * v;
    EXPECT_GT(norm, 0.0f);
    auto plain = load_tp(1, 1);
    EXPECT_THROW(plain->embedding(0), Error);
}

TEST(TensorParallelEngine, SequenceImagesThatDoNotFitAreRefused) {
    auto e = load_tp(2, 2);
    const auto t = e->tokenizer().tokenize("Once upon a time", true, false);
    decode_range(*e, t, 0, (int) t.size(), 0);
    EXPECT_THROW(e->read_sequence(0, (int) t.size() + 1), Error);  // a position not cached
    std::vector<uint8_t> image = e->read_sequence(0, (int) t.size());
    image.pop_back();
    EXPECT_THROW(e->write_sequence(1, t, image), Error);
    EXPECT_EQ(e->seq_pos_max(1), -1);
    // More cells than a sequence's region holds.
    std::vector<int32_t> long_tokens(300, t[1]);
    std::vector<uint8_t> big((size_t) 5 * 2 * 300 * 4 * 8 * 2);
    EXPECT_THROW(e->write_sequence(1, long_tokens, big), Error);
    EXPECT_EQ(e->seq_pos_max(1), -1);
    // The engine still decodes.
    EXPECT_NO_THROW(decode_range(*e, t, 0, (int) t.size(), 1));
}

TEST(ShardPlan, SplitInvariantPiecesAreCellsOfOneGridForEverySplit) {
    const GgufFile file(LLAMA_TP_TEST_MODEL);
    const HParams hp = read_hparams(file);
    const ShardPlan one = ShardPlan::plan(file, hp, 1, {}, true);
    const std::vector<ShardRange> & o_grid = one.ranks[0].o_pieces;
    const std::vector<ShardRange> & ff_grid = one.ranks[0].layers[0].ff.pieces;
    expect_tiles(o_grid, {0, hp.n_head});
    expect_tiles(ff_grid, {0, hp.layer(0).n_ff});
    EXPECT_GT(ff_grid.size(), 4u);  // the boundaries of the 2-, 3-, 4- and 8-way splits

    const std::vector<std::vector<float>> splits = {{1, 1}, {1, 1, 1}, {1, 1, 1, 1}, {3, 1}, {5, 2, 1}};
    for (const auto & weights : splits) {
        SCOPED_TRACE("ranks=" + std::to_string(weights.size()) + " first weight " + std::to_string(weights[0]));
        const ShardPlan p = ShardPlan::plan(file, hp, (int) weights.size(), weights, true);
        for (const RankShard & r : p.ranks) {
            expect_tiles(r.o_pieces, r.q_heads);
            for (const LayerShard & l : r.layers) {
                expect_tiles(l.ff.pieces, l.ff.width);
                for (const ShardRange & piece : l.ff.pieces) EXPECT_TRUE(is_cell_of(piece, ff_grid));
            }
            for (const ShardRange & piece : r.o_pieces) EXPECT_TRUE(is_cell_of(piece, o_grid));
        }
        const ShardPlan plain = ShardPlan::plan(file, hp, (int) weights.size(), weights, false);
        for (const RankShard & r : plain.ranks) {
            ASSERT_EQ(r.o_pieces.size(), 1u);
            for (const LayerShard & l : r.layers) {
                ASSERT_EQ(l.ff.pieces.size(), 1u);
                EXPECT_EQ(l.ff.pieces[0].begin, l.ff.width.begin);
                EXPECT_EQ(l.ff.pieces[0].end, l.ff.width.end);
            }
        }
    }
}

// ggml multiplies a float head of a multiple of 4 rows with llamafile's
// kernel and others with its own: every slice takes the whole head's.
TEST(ShardPlan, VocabularySlicesTakeTheWholeHeadsKernel) {
    const GgufFile file(LLAMA_TP_TEST_MODEL);
    HParams hp = read_hparams(file);
    const std::vector<std::vector<float>> splits = {{1, 1}, {1, 1, 1}, {1, 1, 1, 1}, {3, 1}, {5, 2, 1}};
    for (const int64_t n_vocab : {50257, 32000, 151936, 32001, 32002}) {
        hp.n_vocab = n_vocab;
        for (const auto & weights : splits) {
            SCOPED_TRACE("vocabulary " + std::to_string(n_vocab) + ", " + std::to_string(weights.size()) + " ranks");
            const ShardPlan p = ShardPlan::plan(file, hp, (int) weights.size(), weights, false);
            int64_t next = 0;
            for (const RankShard & r : p.ranks) {
                EXPECT_EQ(r.vocab.begin, next);
                EXPECT_GT(r.vocab.size(), n_vocab / (int64_t) weights.size() / 10);
                EXPECT_EQ(r.vocab.size() % 4 == 0, n_vocab % 4 == 0) << r.vocab.size();
                if (n_vocab % 64 == 0) {
                    EXPECT_EQ(r.vocab.begin % 64, 0);
                }
                next = r.vocab.end;
            }
            EXPECT_EQ(next, n_vocab);
        }
    }
}

TEST(ShardPlan, SplitInvariantRefusesASplitThatLeavesARankOffTheGrid) {
    const GgufFile file(LLAMA_TP_TEST_MODEL);
    const HParams hp = read_hparams(file);
    // 1000:1 gives rank 1 a sliver of the FFN width, nearer the end than any grid boundary.
    EXPECT_NO_THROW(ShardPlan::plan(file, hp, 2, {1000, 1}, false));
    try {
        ShardPlan::plan(file, hp, 2, {1000, 1}, true);
        FAIL() << "planned";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("reduction grid"), std::string::npos) << e.what();
    }
}

TEST(TensorParallelEngine, SplitInvariantSumsRefuseABf16Wire) {
    EngineOptions o;
    o.model_path = LLAMA_TP_TEST_MODEL;
    o.n_ctx = 64;
    o.tp = 2;
    o.split_invariant = true;
    o.allreduce_wire = WireType::BF16;
    try {
        Engine::load(o);
        FAIL() << "loaded";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("--bf16-wire"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace llama_tp

namespace llama_tp {
namespace {

TEST(Sampler, GreedyPicksTheLargestLogitAndHonoursLogitBias) {
    const Tokenizer tok(LLAMA_TP_TEST_MODEL);
    std::vector<float> logits(tok.n_vocab(), 0.0f);
    logits[7] = 5.0f;
    SamplingParams p;
    p.temperature = 0.0f;
    Sampler greedy(tok, p);
    EXPECT_EQ(greedy.sample(logits.data()), 7);
    EXPECT_NEAR(greedy.logprob(logits.data(), 7), 5.0f - std::log(std::exp(5.0f) + (float) (tok.n_vocab() - 1)), 1e-4f);

    p.logit_bias = {{42, 100.0f}};
    Sampler biased(tok, p);
    EXPECT_EQ(biased.sample(logits.data()), 42);

    p.logit_bias = {{tok.n_vocab(), 1.0f}};
    EXPECT_THROW(Sampler(tok, p), Error);
}

// One-hot logits: `token` wins, `second` (if any) comes next.
std::vector<float> favour(const Tokenizer & tok, int32_t token, int32_t second = -1) {
    std::vector<float> logits(tok.n_vocab(), 0.0f);
    logits[token] = 20.0f;
    if (second >= 0) logits[second] = 10.0f;
    return logits;
}

TEST(Sampler, LazyGrammarIsFreeUntilItsTriggerAndBindsAfterIt) {
    const Tokenizer tok(LLAMA_TP_TEST_MODEL);
    SamplingParams p;
    p.temperature = 0.0f;
    p.grammar = "root ::= \"call:\" \" \"? [0-9]+";
    p.grammar_lazy = true;
    p.grammar_trigger_patterns = {"call:"};
    Sampler s(tok, p);

    const int32_t x = tok.tokenize("x", false, false).back();
    const int32_t seven = tok.tokenize("7", false, false).back();
    EXPECT_EQ(s.sample(favour(tok, x).data()), x);  // not triggered yet: anything goes
    for (int32_t t : tok.tokenize(" call:", false, false)) EXPECT_EQ(s.sample(favour(tok, t).data()), t);
    // Triggered: the grammar now wants digits and refuses the favourite.
    const int32_t next = s.sample(favour(tok, x, seven).data());
    EXPECT_EQ(next, seven) << "'" << tok.piece(next) << "'";

    p.grammar_trigger_patterns.clear();
    EXPECT_THROW(Sampler(tok, p), Error);  // a lazy grammar without triggers
}

}  // namespace
}  // namespace llama_tp
