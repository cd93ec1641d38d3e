// The context a server takes without -c.

#include "server/serving/context_size.h"

#include <gtest/gtest.h>

using llama_tp::KvFootprint;
using llama_tp::server::ContextChoice;
using llama_tp::server::fit_context;
using llama_tp::server::fit_requested_context;

namespace {

constexpr uint64_t GiB = 1ull << 30;

// An 8B-shaped model: 32 layers, 8 KV heads of 128, F16: 128 KiB per cell.
KvFootprint eight_b(int32_t n_ctx_train) {
    return {n_ctx_train, 32ull * 2 * 1024 * 2, 8 * GiB};
}

}  // namespace

TEST(ContextSize, TrainingContextPerSlotWhenItFits) {
    const ContextChoice c = fit_context(eight_b(8192), 4, 64 * GiB);
    EXPECT_EQ(c.per_slot, 8192);
    EXPECT_EQ(c.n_ctx, 4 * 8192);
    EXPECT_NE(c.reason.find("training context"), std::string::npos);
}

TEST(ContextSize, LongContextModelIsLimitedToHalfTheFreeMemory) {
    // 128K cells would take 16 GiB per slot; 24 GiB leave 16 free, half is 8.
    const ContextChoice c = fit_context(eight_b(131072), 1, 24 * GiB);
    EXPECT_LT(c.per_slot, 131072);
    EXPECT_EQ(c.per_slot % 256, 0);
    EXPECT_LE((uint64_t) c.n_ctx * eight_b(131072).bytes_per_cell, 8 * GiB);
    EXPECT_GT((uint64_t) c.n_ctx * eight_b(131072).bytes_per_cell, 8 * GiB - 256 * eight_b(0).bytes_per_cell);
    EXPECT_NE(c.reason.find("limited"), std::string::npos);
}

TEST(ContextSize, LongContextModelTakesAtMostTheDefaultCeilingOnALargeHost) {
    // 256 GiB leave 248 free: half would hold every one of the 128K cells
    // (16 GiB), but the default stops at 8 GiB: 64K cells.
    const ContextChoice c = fit_context(eight_b(131072), 1, 256 * GiB);
    EXPECT_EQ(c.per_slot, 65536);
    EXPECT_NE(c.reason.find("the 8.0 GiB a cache takes without -c"), std::string::npos) << c.reason;
    EXPECT_NE(c.reason.find("248.0 GiB"), std::string::npos) << c.reason;
}

TEST(ContextSize, SlotsShareTheBudget) {
    const ContextChoice one = fit_context(eight_b(131072), 1, 24 * GiB);
    const ContextChoice four = fit_context(eight_b(131072), 4, 24 * GiB);
    EXPECT_EQ(four.n_ctx / 4, four.per_slot);
    EXPECT_LE(four.n_ctx, one.n_ctx);
    EXPECT_GE(four.n_ctx, one.n_ctx - 4 * 256);
}

TEST(ContextSize, NoMemoryFigureKeepsTheTrainingContext) {
    EXPECT_EQ(fit_context(eight_b(131072), 2, 0).per_slot, 131072);
}

TEST(ContextSize, TooLittleMemoryStillGivesEverySlotSomeCells) {
    const ContextChoice c = fit_context(eight_b(131072), 2, 8 * GiB + (100ull << 20));
    EXPECT_EQ(c.per_slot, 256);
    EXPECT_EQ(fit_context(eight_b(100), 2, 1 * GiB).per_slot, 100);
}

TEST(ContextSize, SlidingWindowLayersKeepingTheirWindowLeaveRoomForMore) {
    // A Gemma 3 27B-shaped model: 62 layers of 16 KV heads of 128 (8 KiB a
    // cell each), 52 of them sliding-window layers keeping 1792 cells a slot.
    const uint64_t layer = 16ull * 128 * 2 * 2;
    const KvFootprint every_cell{131072, 62 * layer, 16 * GiB};
    const KvFootprint window{131072, 10 * layer, 16 * GiB, 52 * layer * 1792};
    const ContextChoice full = fit_context(every_cell, 2, 32 * GiB);
    const ContextChoice windowed = fit_context(window, 2, 32 * GiB);
    EXPECT_GT(windowed.per_slot, 4 * full.per_slot);
    // Within the 8 GiB budget, the windows included.
    EXPECT_LE(((uint64_t) windowed.per_slot * window.bytes_per_cell + window.fixed_bytes_per_slot) * 2, 8 * GiB);
    EXPECT_GT(((uint64_t) (windowed.per_slot + 256) * window.bytes_per_cell + window.fixed_bytes_per_slot) * 2,
              8 * GiB);
}

// -c with the slots left automatic (llama-server shares -c cells among them).
TEST(ContextSize, RequestedContextGivesEverySlotItsOwnCellsWhenTheyFit) {
    // 4 x 8192 cells of 128 KiB: 4 GiB, within half of 64 - 8 GiB.
    const ContextChoice c = fit_requested_context(eight_b(131072), 4, 8192, 64 * GiB);
    EXPECT_FALSE(c.shared);
    EXPECT_EQ(c.per_slot, 8192);
    EXPECT_EQ(c.n_ctx, 4 * 8192);
    EXPECT_NE(c.reason.find("its own 8192 cells"), std::string::npos) << c.reason;
}

TEST(ContextSize, RequestedContextIsSharedWhenRegionsWouldNotFit) {
    // 4 x 65536 cells would take 32 GiB; half of 24 - 8 GiB is 8.
    const ContextChoice c = fit_requested_context(eight_b(131072), 4, 65536, 24 * GiB);
    EXPECT_TRUE(c.shared);
    EXPECT_EQ(c.per_slot, 65536);
    EXPECT_EQ(c.n_ctx, 65536);
    EXPECT_NE(c.reason.find("share 65536 cells"), std::string::npos) << c.reason;
    // Unknown free memory: the cells asked for, shared.
    EXPECT_TRUE(fit_requested_context(eight_b(131072), 4, 8192, 0).shared);
}

TEST(ContextSize, RequestedContextTakesRegionsPastTheDefaultCeiling) {
    // 4 x 32768 cells: 16 GiB, more than a cache takes without -c, but -c
    // asked for the cells and half of 512 GiB holds a region of them per slot.
    const ContextChoice c = fit_requested_context(eight_b(131072), 4, 32768, 512 * GiB);
    EXPECT_FALSE(c.shared);
    EXPECT_EQ(c.n_ctx, 4 * 32768);
}

TEST(ContextSize, RequestedContextZeroIsTheTrainingContext) {
    const ContextChoice c = fit_requested_context(eight_b(4096), 2, 0, 64 * GiB);
    EXPECT_FALSE(c.shared);
    EXPECT_EQ(c.per_slot, 4096);
    EXPECT_EQ(c.n_ctx, 8192);
}
