#include "tools/common/accuracy_contract.h"

#include <gtest/gtest.h>

namespace llama_tp {
namespace {

ModelInfo model(bool quantized, bool moe = false, bool tiled = true) {
    ModelInfo m;
    m.quantized = quantized;
    m.moe = moe;
    m.split_tiled = tiled;
    return m;
}

ComparedRun against_tp1(bool split_invariant = false, bool bf16 = false) {
    ComparedRun r;
    r.split_invariant = split_invariant;
    r.bf16_wire = bf16;
    return r;
}

TEST(AccuracyContract, SplitInvariantSumsAreIdenticalOnTheTiles) {
    const AccuracyBounds b = contract_bounds(against_tp1(true), model(true));
    EXPECT_EQ(b.max_abs_dp, 0.0);
    EXPECT_EQ(b.min_top1, 1.0);
    EXPECT_TRUE(b.greedy);
    const AccuracyBounds off = contract_bounds(against_tp1(true), model(false, false, false));
    EXPECT_EQ(off.max_abs_dp, 2e-3);  // the default F16 cache
    EXPECT_EQ(off.max_mean_kl, 1e-4);
}

TEST(AccuracyContract, DefaultSumsFollowTheActivationType) {
    const AccuracyBounds f = contract_bounds(against_tp1(), model(false));
    EXPECT_EQ(f.max_abs_dp, 2e-3);  // the default F16 cache rounds keys and values
    EXPECT_EQ(f.max_mean_kl, 1e-4);
    EXPECT_EQ(f.near_tie, 1e-4);
    EXPECT_EQ(f.min_top1, 1.0);
    ComparedRun f32_cache = against_tp1();
    f32_cache.kv_types = {GGML_TYPE_F32, GGML_TYPE_F32};
    EXPECT_EQ(contract_bounds(f32_cache, model(false)).max_abs_dp, 1e-3);
    // Latent attention: one cached row every head reads; no V cache, so -ctk decides.
    ModelInfo latent = model(false);
    latent.latent_attention = true;
    const AccuracyBounds l = contract_bounds(against_tp1(), latent);
    EXPECT_EQ(l.clause, "float sums, float, 16-bit latent cache");
    EXPECT_EQ(l.max_abs_dp, 6e-3);
    ComparedRun f32_keys = against_tp1();
    f32_keys.kv_types = {GGML_TYPE_F32, GGML_TYPE_F16};
    EXPECT_EQ(contract_bounds(f32_keys, latent).max_abs_dp, 1e-3);
    ComparedRun q8_cache = against_tp1();
    q8_cache.kv_types = {GGML_TYPE_Q8_0, GGML_TYPE_F16};  // quantized keys: as quantized weights
    EXPECT_EQ(contract_bounds(q8_cache, model(false)).near_tie, 2e-2);
    const AccuracyBounds q = contract_bounds(against_tp1(), model(true));
    EXPECT_LT(q.max_abs_dp, 0.0);
    EXPECT_EQ(q.max_mean_kl, 6e-3);
    EXPECT_EQ(q.near_tie, 2e-2);
    EXPECT_EQ(q.min_top1, 0.95);
    EXPECT_FALSE(q.greedy) << "a flipped 8-bit step can part the greedy texts";
    const AccuracyBounds moe = contract_bounds(against_tp1(), model(true, true));
    EXPECT_EQ(moe.max_mean_kl, 6e-3);
    EXPECT_EQ(moe.min_top1, 0.0);
    EXPECT_FALSE(moe.greedy);
    ModelInfo recurrent = model(true);
    recurrent.recurrent = true;
    const AccuracyBounds r = contract_bounds(against_tp1(), recurrent);
    EXPECT_EQ(r.clause, "float sums, quantized linear attention");
    EXPECT_EQ(r.max_mean_kl, 6e-3);
    EXPECT_EQ(r.min_top1, 0.95);
    EXPECT_FALSE(r.greedy);
    // Float MoE routes on float values: a flip there is a real difference.
    EXPECT_EQ(contract_bounds(against_tp1(), model(false, true)).min_top1, 1.0);
    // F16 weights: ggml rounds their inputs to 16 bits.
    ModelInfo half = model(false);
    half.half_weights = true;
    const AccuracyBounds h = contract_bounds(against_tp1(), half);
    EXPECT_EQ(h.clause, "float sums, 16-bit activations");
    EXPECT_EQ(h.max_abs_dp, 1e-2);
    EXPECT_EQ(h.max_mean_kl, 1e-4);
    EXPECT_EQ(h.min_top1, 1.0);
    EXPECT_TRUE(h.greedy);
    // On a GPU cuBLAS accumulates them in 16 bits too.
    ComparedRun on_gpu = against_tp1();
    on_gpu.gpu = true;
    const AccuracyBounds g = contract_bounds(on_gpu, half);
    EXPECT_EQ(g.clause, "float sums, 16-bit activations, 16-bit accumulation on the GPU");
    EXPECT_EQ(g.max_abs_dp, 5e-2);
    EXPECT_EQ(g.max_mean_kl, 5e-4);
    EXPECT_TRUE(g.greedy);
    EXPECT_EQ(contract_bounds(on_gpu, model(false)).max_abs_dp, contract_bounds(against_tp1(), model(false)).max_abs_dp)
        << "f32 weights accumulate in f32 there";
}

TEST(AccuracyContract, Bf16WireBoundsTheMeanKlByActivationType) {
    EXPECT_EQ(contract_bounds(against_tp1(false, true), model(false)).max_mean_kl, 1e-3);
    EXPECT_EQ(contract_bounds(against_tp1(false, true), model(true)).max_mean_kl, 1e-2);
}

TEST(AccuracyContract, UpstreamIsOneDeviceWithinRounding) {
    ComparedRun r;
    r.reference_upstream = true;
    const AccuracyBounds b = contract_bounds(r, model(true));
    EXPECT_EQ(b.max_abs_dp, 1e-3);
    EXPECT_EQ(b.min_top1, 1.0);
    r.split_invariant = true;
    EXPECT_EQ(contract_bounds(r, model(true)).max_mean_kl, 6e-3);
}

TEST(AccuracyContract, UpstreamBatchesARecurrentModelsSequencesApart) {
    ComparedRun r;
    r.reference_upstream = true;
    ModelInfo m = model(false);
    m.half_weights = true;
    m.recurrent = true;
    const AccuracyBounds b = contract_bounds(r, m);
    EXPECT_EQ(b.max_abs_dp, 1e-2);  // as 16-bit activations added in another order
    EXPECT_NE(b.clause.find("linear attention"), std::string::npos) << b.clause;
    m.recurrent = false;
    EXPECT_EQ(contract_bounds(r, m).max_abs_dp, 1e-3);
}

TEST(AccuracyContract, KvCacheAgainstF16JudgesEightBitsAndReportsFewer) {
    ComparedRun r;
    r.reference_f16_kv = true;
    r.kv_types = {GGML_TYPE_Q8_0, GGML_TYPE_BF16};
    AccuracyBounds b = contract_bounds(r, model(true));
    EXPECT_EQ(b.max_mean_kl, 5e-2);
    EXPECT_EQ(b.min_top1, 0.0);
    EXPECT_FALSE(b.greedy);
    EXPECT_NE(b.clause.find("k q8_0, v bf16"), std::string::npos) << b.clause;
    r.kv_types = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};  // the coarser type decides
    b = contract_bounds(r, model(false));
    EXPECT_LT(b.max_mean_kl, 0.0);
    EXPECT_NE(b.clause.find("reported"), std::string::npos) << b.clause;
}

}  // namespace
}  // namespace llama_tp
