#include "runtime/kv/kv_cache.h"

#include "runtime/error.h"

#include <cmath>

#include <gtest/gtest.h>

#include "ggml-backend.h"
#include "ggml-cpu.h"

namespace llama_tp {
namespace {

HParams tiny_hparams() {
    HParams hp;
    hp.n_layer = 2;
    hp.n_head = 4;
    hp.set_uniform_layers({/*n_head_kv =*/2, /*head_dim =*/8, /*n_rot =*/8, /*n_ff =*/16});
    return hp;
}

class KvCacheTest : public ::testing::Test {
  protected:
    KvCells kv{600, 3, /*unified=*/true};
};

TEST_F(KvCacheTest, PlacesTokensInFreeCellsAndTracksPositions) {
    Batch b;
    for (int i = 0; i < 5; ++i) b.add(1, i, 0, false);
    b.add(1, 0, 2, true);
    std::vector<int64_t> cells;
    ASSERT_TRUE(kv.place(b, cells));
    EXPECT_EQ(cells, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(kv.seq_pos_max(0), 4);
    EXPECT_EQ(kv.seq_pos_max(1), -1);
    EXPECT_EQ(kv.seq_pos_max(2), 0);
    EXPECT_EQ(kv.n_free(), 594);
}

TEST_F(KvCacheTest, RefusesBatchLargerThanFreeCellsWithoutChangingAnything) {
    Batch b;
    for (int i = 0; i < 601; ++i) b.add(1, i, 0, false);
    std::vector<int64_t> cells;
    EXPECT_FALSE(kv.place(b, cells));
    EXPECT_EQ(kv.n_free(), 600);
    EXPECT_EQ(kv.seq_pos_max(0), -1);
}

TEST_F(KvCacheTest, UnplaceAndSeqRemoveFreeCells) {
    Batch b;
    for (int i = 0; i < 10; ++i) b.add(1, i, 1, false);
    std::vector<int64_t> cells;
    ASSERT_TRUE(kv.place(b, cells));
    kv.seq_remove(1, 5, -1);
    EXPECT_EQ(kv.seq_pos_max(1), 4);
    EXPECT_EQ(kv.n_free(), 595);
    kv.unplace({0, 1, 2, 3, 4});
    EXPECT_EQ(kv.seq_pos_max(1), -1);
    EXPECT_EQ(kv.n_free(), 600);
}

TEST_F(KvCacheTest, WindowIsRoundedAndCoversUsedCells) {
    Batch b;
    b.add(1, 0, 0, false);
    std::vector<int64_t> cells;
    ASSERT_TRUE(kv.place(b, cells));
    EXPECT_EQ(kv.window(), 256);
    Batch big;
    for (int i = 1; i < 300; ++i) big.add(1, i, 0, false);
    ASSERT_TRUE(kv.place(big, cells));
    EXPECT_EQ(kv.window(), 512);
    Batch more;
    for (int i = 300; i < 550; ++i) more.add(1, i, 0, false);
    ASSERT_TRUE(kv.place(more, cells));
    EXPECT_EQ(kv.window(), 600);  // capped at the cache size
}

TEST_F(KvCacheTest, MaskSeparatesSequencesAndIsCausal) {
    Batch b;
    b.add(1, 0, 0, false);
    b.add(1, 1, 0, false);
    b.add(1, 0, 1, false);
    std::vector<int64_t> cells;
    ASSERT_TRUE(kv.place(b, cells));
    const auto runs = kv.attention_runs(b);
    ASSERT_EQ(runs.size(), 1u);  // unified: one run over the shared window
    const int32_t w = kv.window();
    EXPECT_EQ(runs[0], (AttentionRun{0, 3, 0, w}));
    std::vector<ggml_fp16_t> mask((size_t) w * b.size());
    kv.fill_mask(b, runs[0], mask.data());
    auto visible = [&](int t, int c) { return std::isfinite(ggml_fp16_to_fp32(mask[(size_t) t * w + c])); };
    EXPECT_TRUE(visible(0, 0));
    EXPECT_FALSE(visible(0, 1));  // causal: position 0 does not see position 1
    EXPECT_FALSE(visible(0, 2));  // other sequence
    EXPECT_TRUE(visible(1, 0));
    EXPECT_TRUE(visible(1, 1));
    EXPECT_FALSE(visible(1, 2));
    EXPECT_FALSE(visible(2, 0));
    EXPECT_TRUE(visible(2, 2));
    EXPECT_FALSE(visible(2, 3));  // free cell
}

class PerSequenceKvCacheTest : public ::testing::Test {
  protected:
    // Three regions of 200 cells.
    KvCells kv{600, 3, /*unified=*/false};
};

TEST_F(PerSequenceKvCacheTest, EachSequencePlacesInItsOwnRegion) {
    EXPECT_EQ(kv.n_cells_per_seq(), 200);
    Batch b;
    b.add(1, 0, 2, false);
    b.add(1, 0, 0, false);
    b.add(1, 1, 2, false);
    std::vector<int64_t> cells;
    ASSERT_TRUE(kv.place(b, cells));
    EXPECT_EQ(cells, (std::vector<int64_t>{400, 0, 401}));
    kv.seq_remove(2, 0, 1);
    Batch c;
    c.add(1, 0, 2, false);
    ASSERT_TRUE(kv.place(c, cells));
    EXPECT_EQ(cells, (std::vector<int64_t>{400}));  // the lowest free cell of the region again
}

TEST_F(PerSequenceKvCacheTest, AFullRegionRefusesAndNamesTheSequence) {
    Batch b;
    for (int i = 0; i < 200; ++i) b.add(1, i, 1, false);
    std::vector<int64_t> cells;
    ASSERT_TRUE(kv.place(b, cells));
    Batch more;
    more.add(1, 0, 0, false);  // fits
    more.add(1, 200, 1, false);
    std::string why;
    EXPECT_FALSE(kv.place(more, cells, &why));
    EXPECT_NE(why.find("sequence 1"), std::string::npos) << why;
    EXPECT_EQ(kv.seq_pos_max(0), -1);  // the token that fitted was taken back
    EXPECT_EQ(kv.n_free(), 400);
}

TEST_F(PerSequenceKvCacheTest, GroupedBatchGetsOneRunPerSequenceOverItsRegion) {
    Batch warm;
    for (int i = 0; i < 190; ++i) warm.add(1, i, 1, false);
    std::vector<int64_t> cells;
    ASSERT_TRUE(kv.place(warm, cells));

    Batch b;
    b.add(1, 190, 1, true);
    b.add(1, 0, 2, false);
    b.add(1, 1, 2, true);
    ASSERT_TRUE(kv.place(b, cells));
    const auto runs = kv.attention_runs(b);
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_EQ(runs[0], (AttentionRun{0, 1, 200, 200, 1, 200}));  // 191 cells rounded up, capped at the region
    EXPECT_EQ(runs[1], (AttentionRun{1, 2, 400, 200, 1, 200}));

    std::vector<ggml_fp16_t> mask((size_t) runs[1].window * runs[1].n_tokens);
    kv.fill_mask(b, runs[1], mask.data());
    auto visible = [&](int t, int c) {
        return std::isfinite(ggml_fp16_to_fp32(mask[(size_t) t * runs[1].window + c]));
    };
    EXPECT_TRUE(visible(0, 0));
    EXPECT_FALSE(visible(0, 1));
    EXPECT_TRUE(visible(1, 1));
    EXPECT_FALSE(visible(1, 2));
}

TEST_F(PerSequenceKvCacheTest, SingleTokensOfConsecutiveSequencesShareOneRunOfStreams) {
    Batch b;
    b.add(1, 0, 0, true);
    b.add(1, 0, 1, true);
    b.add(1, 0, 2, true);
    std::vector<int64_t> cells;
    ASSERT_TRUE(kv.place(b, cells));
    const auto runs = kv.attention_runs(b);
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0], (AttentionRun{0, 1, 0, 200, 3, 200}));
    std::vector<ggml_fp16_t> mask((size_t) runs[0].window * runs[0].size());
    kv.fill_mask(b, runs[0], mask.data());
    for (int j = 0; j < 3; ++j) {  // each stream sees its own first cell only
        EXPECT_TRUE(std::isfinite(ggml_fp16_to_fp32(mask[(size_t) j * 200])));
        EXPECT_FALSE(std::isfinite(ggml_fp16_to_fp32(mask[(size_t) j * 200 + 1])));
    }

    Batch gap;  // sequences 0 and 2: not neighbours, two runs
    gap.add(1, 1, 0, true);
    gap.add(1, 1, 2, true);
    ASSERT_TRUE(kv.place(gap, cells));
    EXPECT_EQ(kv.attention_runs(gap).size(), 2u);
}

// A window pool of 2 regions of 512 cells; each sequence keeps its last 7 positions.
class WindowKvCellsTest : public ::testing::Test {
  protected:
    KvCells kv{1024, 2, /*unified=*/false, /*keep=*/7};
    std::vector<int64_t> cells;
    std::vector<KvMove> moved;

    bool place(int seq, int p0, int n) {
        Batch b;
        for (int i = 0; i < n; ++i) b.add(1, p0 + i, seq, false);
        return kv.place(b, cells, nullptr, &moved);
    }
};

TEST_F(WindowKvCellsTest, AppendsThenPacksTheWindowKeepingLanes) {
    ASSERT_TRUE(place(0, 0, 300));
    ASSERT_TRUE(place(0, 300, 200));  // 500 cells used, nothing dropped yet
    EXPECT_TRUE(moved.empty());
    EXPECT_EQ(cells.front(), 300);
    EXPECT_TRUE(kv.resumable(0, 100));  // every position still cached
    ASSERT_TRUE(place(0, 500, 20));     // no room: positions 493.. kept, moved down by 256
    ASSERT_EQ(moved.size(), 7u);
    EXPECT_EQ(moved.front(), (KvMove{493, 237}));
    EXPECT_EQ(moved.back(), (KvMove{499, 243}));
    EXPECT_EQ(cells.front(), 244);
    EXPECT_EQ(kv.seq_pos_max(0), 519);
    EXPECT_FALSE(kv.resumable(0, 400));  // its window is gone
    EXPECT_TRUE(kv.resumable(0, 520));
    std::vector<int64_t> tail;
    ASSERT_TRUE(kv.cells_of(0, 520, tail));
    EXPECT_EQ(tail, (std::vector<int64_t>{257, 258, 259, 260, 261, 262, 263}));
    EXPECT_EQ(kv.seq_pos_max(1), -1);  // the other region is untouched
}

TEST_F(WindowKvCellsTest, RefusesABatchLargerThanTheRoomWithoutChangingAnything) {
    ASSERT_TRUE(place(1, 0, 500));
    std::string why;
    Batch b;
    for (int i = 0; i < 506; ++i) b.add(1, 500 + i, 1, false);
    EXPECT_FALSE(kv.place(b, cells, &why, &moved));
    EXPECT_NE(why.find("sliding-window"), std::string::npos) << why;
    EXPECT_TRUE(moved.empty());
    EXPECT_TRUE(kv.resumable(1, 10));
}

TEST_F(WindowKvCellsTest, CopiesOnlyTheWindowBeforeTheEnd) {
    ASSERT_TRUE(place(0, 0, 40));
    std::vector<std::pair<int64_t, int64_t>> copied;
    ASSERT_TRUE(kv.copy_fits(0, 1, 0, 30));
    ASSERT_TRUE(kv.seq_copy(0, 1, 0, 30, copied, &moved));
    ASSERT_EQ(copied.size(), 7u);
    // Position 23 at offset 23 of the empty region, as in the original's.
    EXPECT_EQ(copied.front(), (std::pair<int64_t, int64_t>{23, 512 + 23}));
    EXPECT_EQ(kv.seq_pos_max(1), 29);
    EXPECT_TRUE(kv.resumable(1, 30));
    EXPECT_FALSE(kv.resumable(1, 20));
}

TEST(WindowKvCells, ACopyInOneSharedPoolKeepsTheSourceCellsItReads) {
    KvCells kv{512, 2, /*unified=*/true, /*keep=*/7};
    Batch b;
    for (int i = 0; i < 506; ++i) b.add(1, i, 0, false);
    std::vector<int64_t> cells;
    std::vector<KvMove> moved;
    ASSERT_TRUE(kv.place(b, cells, nullptr, &moved));
    // Positions 493..499 of sequence 0 for sequence 1: no room without
    // packing, which must keep them although sequence 0 reads from 499 on.
    std::vector<std::pair<int64_t, int64_t>> copied;
    ASSERT_TRUE(kv.copy_fits(0, 1, 0, 500));
    ASSERT_TRUE(kv.seq_copy(0, 1, 0, 500, copied, &moved));
    EXPECT_EQ(copied.size(), 7u);
    EXPECT_FALSE(moved.empty());
    EXPECT_TRUE(kv.resumable(1, 500));
    EXPECT_TRUE(kv.resumable(0, 506));
}

TEST(KvCacheTypes, NamesTypesAndBlockSizes) {
    EXPECT_EQ(kv_type_from_name("q8_0"), GGML_TYPE_Q8_0);
    EXPECT_EQ(kv_type_from_name("f16"), GGML_TYPE_F16);
    EXPECT_EQ(kv_type_from_name("iq4_nl"), GGML_TYPE_IQ4_NL);
    try {
        kv_type_from_name("q3_k");
        FAIL() << "q3_k accepted";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("q5_1"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(check_kv_type(GGML_TYPE_Q8_0, 64, "K"));
    EXPECT_THROW(check_kv_type(GGML_TYPE_Q8_0, 8, "K"), Error);
    EXPECT_THROW(check_kv_type(GGML_TYPE_Q2_K, 256, "K"), Error);
    HParams hp;
    hp.n_layer = 2;
    hp.set_uniform_layers({2, 32, 32, 64});
    hp.blocks.assign(2, LayerBlocks{});
    KvCache kv{
        hp, {2, 2}, KvPoolSizes{64, 1, false}, KvTypes{GGML_TYPE_Q8_0, GGML_TYPE_Q4_0}, ggml_backend_cpu_buffer_type()};
    EXPECT_EQ(kv.k(1)->type, GGML_TYPE_Q8_0);
    EXPECT_EQ(kv.v(0)->type, GGML_TYPE_Q4_0);
    EXPECT_FALSE(kv.types().both_f16());
    // 64 cells of 2 heads x 32: 2 blocks of 34 bytes (q8_0) and 18 bytes (q4_0) per cell and layer.
    EXPECT_GE(kv.bytes(), (size_t) 2 * 64 * 2 * (34 + 18));
}

TEST_F(PerSequenceKvCacheTest, UngroupedBatchFallsBackToOneRunOverEverything) {
    Batch b;
    b.add(1, 0, 0, false);
    b.add(1, 0, 1, false);
    b.add(1, 1, 0, true);  // sequence 0 again, after sequence 1
    std::vector<int64_t> cells;
    ASSERT_TRUE(kv.place(b, cells));
    const auto runs = kv.attention_runs(b);
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0], (AttentionRun{0, 3, 0, kv.window()}));
    EXPECT_GE(kv.window(), 201);  // covers sequence 1's region too
}

TEST(KvCacheLayout, RefusesMoreSequencesThanCells) {
    EXPECT_THROW(KvCache(tiny_hparams(), {2, 2}, KvPoolSizes{2, 3, false}, KvTypes{}, ggml_backend_cpu_buffer_type()),
                 std::exception);
}

// GPU ranks round each region up to whole windows of 256 cells.
TEST(KvPoolSizes, WholeWindowsRoundEachRegionUp) {
    const HParams hp = tiny_hparams();
    EXPECT_EQ(KvPoolSizes::of(hp, 1144, 1, false, 512, false).n_cells, 1144) << "as asked on the CPU";
    EXPECT_EQ(KvPoolSizes::of(hp, 1144, 1, false, 512, false, true).n_cells, 1280);
    EXPECT_EQ(KvPoolSizes::of(hp, 1000, 3, false, 512, false, true).n_cells, 3 * 512) << "regions of 333 cells";
    EXPECT_EQ(KvPoolSizes::of(hp, 1000, 3, true, 512, false, true).n_cells, 1024) << "one unified pool";
    EXPECT_EQ(KvPoolSizes::of(hp, 2048, 2, false, 512, false, true).n_cells, 2048) << "already whole";
}

// A recurrent state's bookkeeping: where each sequence goes on, what a
// removal, a shift or a copy leaves of it, and the runs a batch makes.
TEST(RecurrentCells, AStateGoesOnOnlyWhereItIs) {
    RecurrentCells s{3};
    Batch b;
    for (int i = 0; i < 5; ++i) b.add(1, i, 0, false);
    StatePlacement p;
    ASSERT_TRUE(s.place(b, p));
    EXPECT_EQ(s.next(0), 5);
    EXPECT_EQ(p.keep, std::vector<float>{0.0f});  // a new sequence starts from zeros
    EXPECT_TRUE(s.resumable(0, 5));
    EXPECT_TRUE(s.resumable(0, 0));
    EXPECT_FALSE(s.resumable(0, 3));
    Batch gap;
    gap.add(1, 6, 0, true);
    std::string why;
    EXPECT_FALSE(s.place(gap, p, &why));
    EXPECT_NE(why.find("positions [0, 5)"), std::string::npos) << why;
    EXPECT_EQ(s.next(0), 5);
    Batch next;
    next.add(1, 5, 0, true);
    ASSERT_TRUE(s.place(next, p));
    EXPECT_EQ(p.keep, std::vector<float>{1.0f});
    s.unplace(p);
    EXPECT_EQ(s.next(0), 5);
}

TEST(RecurrentCells, RemovingPositionsItTookInLosesTheStateUnlessAllGo) {
    RecurrentCells s{2};
    Batch b;
    for (int i = 0; i < 8; ++i) b.add(1, i, 0, false);
    StatePlacement p;
    ASSERT_TRUE(s.place(b, p));
    s.seq_remove(0, 8, -1);  // nothing it took in
    EXPECT_EQ(s.next(0), 8);
    s.seq_remove(0, 6, -1);
    EXPECT_EQ(s.next(0), RecurrentCells::kLost);
    EXPECT_FALSE(s.resumable(0, 6));
    EXPECT_TRUE(s.resumable(0, 0));
    Batch again;
    again.add(1, 6, 0, true);
    std::string why;
    EXPECT_FALSE(s.place(again, p, &why));
    EXPECT_NE(why.find("lost"), std::string::npos) << why;
    s.seq_remove(0, 0, -1);
    EXPECT_EQ(s.next(0), 0);
}

TEST(RecurrentCells, ShiftsMoveTheEndAndCopiesCarryAWholeState) {
    RecurrentCells s{3};
    Batch b;
    for (int i = 0; i < 10; ++i) b.add(1, i, 0, false);
    StatePlacement p;
    ASSERT_TRUE(s.place(b, p));
    s.seq_shift(0, 4, -1, -2);  // the tail moves: it goes on 2 earlier
    EXPECT_EQ(s.next(0), 8);
    EXPECT_FALSE(s.copy_fits(0, 1, 0, 5));  // a prefix of it is no state
    EXPECT_TRUE(s.copy_fits(0, 1, 0, -1));
    s.seq_copy(0, 1);
    EXPECT_EQ(s.next(1), 8);
    EXPECT_FALSE(s.copy_fits(0, 1, 0, -1));  // 1 holds a state already
    s.seq_shift(0, 2, 4, 1);                 // a middle moved: lost
    EXPECT_EQ(s.next(0), RecurrentCells::kLost);
}

TEST(RecurrentCells, ASavedStateIsWhereARemovedTailGoesBackTo) {
    RecurrentCells s{2, /*saves =*/true};
    Batch b;
    for (int i = 0; i < 5; ++i) b.add(1, i, 1, false);
    StatePlacement p;
    ASSERT_TRUE(s.place(b, p));
    EXPECT_EQ(s.save(1), (std::pair<int32_t, int32_t>{1, 3}));  // into the second row, 2 + 1
    Batch draft;
    for (int i = 5; i < 9; ++i) draft.add(1, i, 1, true);
    ASSERT_TRUE(s.place(draft, p));
    EXPECT_TRUE(s.resumable(1, 5));
    EXPECT_EQ(s.seq_remove(1, 5, -1), (std::pair<int32_t, int32_t>{3, 1}));  // back from the second row
    EXPECT_EQ(s.next(1), 5);
    // Again from there, and then a removal past the saved position: lost,
    // but the saved state still comes back.
    ASSERT_TRUE(s.place(draft, p));
    EXPECT_EQ(s.seq_remove(1, 7, -1), (std::pair<int32_t, int32_t>{-1, -1}));
    EXPECT_EQ(s.next(1), RecurrentCells::kLost);
    EXPECT_EQ(s.seq_remove(1, 5, -1), (std::pair<int32_t, int32_t>{3, 1}));
    EXPECT_EQ(s.next(1), 5);
    // Taking away positions before it, or a shift, forgets it.
    s.seq_remove(1, 3, -1);
    EXPECT_EQ(s.saved(1), RecurrentCells::kLost);
    EXPECT_FALSE(s.resumable(1, 5));
    RecurrentCells none{2};
    EXPECT_EQ(none.save(0), (std::pair<int32_t, int32_t>{-1, -1}));  // no second rows
}

TEST(RecurrentCells, NeighbouringSequencesOfEqualLengthShareARun) {
    RecurrentCells s{4};
    Batch b;
    for (int seq : {2, 0, 3}) b.add(1, 0, seq, true);  // one token each
    for (int i = 0; i < 3; ++i) b.add(1, i, 1, true);  // then three of sequence 1
    StatePlacement p;
    ASSERT_TRUE(s.place(b, p));
    ASSERT_EQ(p.runs.size(), 2u);
    EXPECT_EQ(p.runs[0], (StateRun{0, 1, 3, 0}));
    EXPECT_EQ(p.runs[1], (StateRun{3, 3, 1, 3}));
    EXPECT_EQ(p.rows, (std::vector<int32_t>{2, 0, 3, 1}));
    Batch split;
    split.add(1, 1, 2, false);
    split.add(1, 3, 1, false);
    split.add(1, 2, 2, false);
    std::string why;
    EXPECT_FALSE(s.place(split, p, &why));
    EXPECT_NE(why.find("not consecutive"), std::string::npos) << why;
}

TEST(RecurrentCells, AStepThatFailedOnTheWayLosesItsStatesAndStrangeRangesChangeNothing) {
    RecurrentCells s{2};
    Batch b;
    for (int i = 0; i < 4; ++i) b.add(1, i, 0, false);
    StatePlacement p;
    ASSERT_TRUE(s.place(b, p));
    Batch next;
    next.add(1, 4, 0, true);
    ASSERT_TRUE(s.place(next, p));
    s.unplace(p, /*stepped =*/true);  // its rows may hold the step's states already
    EXPECT_EQ(s.next(0), RecurrentCells::kLost);
    s.seq_remove(0, 0, -1);
    ASSERT_TRUE(s.place(b, p));
    s.seq_remove(0, -1, 0);   // empty
    s.seq_remove(0, 3, 3);    // empty
    s.seq_shift(0, 2, 2, 5);  // empty
    s.seq_remove(-1, 0, -1);  // no such sequence
    s.seq_remove(7, 0, -1);
    EXPECT_EQ(s.next(0), 4);
    EXPECT_FALSE(s.copy_fits(0, 9, 0, -1));
    EXPECT_FALSE(s.resumable(9, 4));
}

}  // namespace
}  // namespace llama_tp
