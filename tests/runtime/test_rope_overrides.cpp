// RoPE overrides (llama-server's --rope-* and --yarn-*) by upstream's rules,
// and an engine that applies them.

#include "runtime/engine.h"
#include "runtime/model/hparams.h"

#include <cmath>

#include <gtest/gtest.h>

namespace llama_tp {
namespace {

// A file's RoPE: YaRN off, base 10000, original context 4096.
HParams file_rope(RopeScaling scaling = RopeScaling::None, float freq_scale = 1.0f) {
    HParams hp;
    hp.n_ctx_train = 4096;
    hp.n_ctx_orig_train = 4096;
    hp.rope_scaling_train = scaling;
    hp.rope_freq_scale_train = freq_scale;
    hp.rope_freq_base_train = 10000.0f;
    hp.rope_freq_base_swa = 10000.0f;
    apply_rope_overrides(hp, RopeOverrides{});
    return hp;
}

TEST(RopeOverrides, NoneKeepsTheFilesValues) {
    const HParams hp = file_rope(RopeScaling::Linear, 0.5f);
    EXPECT_EQ(hp.rope_freq_base, 10000.0f);
    EXPECT_EQ(hp.rope_freq_scale, 0.5f);
    EXPECT_EQ(hp.yarn_ext_factor, 0.0f);
    EXPECT_EQ(hp.yarn_attn_factor, 1.0f);
    EXPECT_EQ(hp.rope_n_ctx_orig, 4096);
    EXPECT_EQ(hp.n_ctx_train, 4096);
}

TEST(RopeOverrides, NoScalingForcesAScaleOfOne) {
    HParams hp = file_rope(RopeScaling::Linear, 0.5f);
    RopeOverrides o;
    o.scaling = RopeScaling::None;
    o.freq_scale = 0.25f;
    apply_rope_overrides(hp, o);
    EXPECT_EQ(hp.rope_freq_scale, 1.0f);
}

TEST(RopeOverrides, BaseAndLinearScaleReplaceTheFilesButNotTheSlidingWindowBase) {
    HParams hp = file_rope();
    RopeOverrides o;
    o.scaling = RopeScaling::Linear;
    o.freq_base = 500000.0f;
    o.freq_scale = 0.25f;
    apply_rope_overrides(hp, o);
    EXPECT_EQ(hp.rope_freq_base, 500000.0f);
    EXPECT_EQ(hp.rope_freq_scale, 0.25f);
    EXPECT_EQ(hp.yarn_ext_factor, 0.0f);
    EXPECT_EQ(hp.rope_freq_base_swa, 10000.0f);
}

TEST(RopeOverrides, YarnExtrapolatesWithTheMagnitudeOfItsScale) {
    HParams hp = file_rope();
    hp.rope_attn_factor = 0.5f;
    RopeOverrides o;
    o.scaling = RopeScaling::Yarn;
    o.freq_scale = 0.25f;
    o.yarn_attn_factor = 3.0f;  // replaced by the scale's magnitude, as upstream does
    o.yarn_orig_ctx = 8192;
    apply_rope_overrides(hp, o);
    EXPECT_EQ(hp.yarn_ext_factor, 1.0f);
    EXPECT_EQ(hp.rope_n_ctx_orig, 8192);
    EXPECT_EQ(hp.n_ctx_train, 4096);
    // (1 + 0.1 ln 4) / (1 + 0.1 ln 4), then the file's factor.
    EXPECT_NEAR(hp.yarn_attn_factor, 0.5f, 1e-7f);
    EXPECT_EQ(hp.yarn_beta_fast, 32.0f);
    EXPECT_EQ(hp.yarn_beta_slow, 1.0f);
    o.yarn_ext_factor = 0.0f;  // interpolation only: the factor given is kept
    o.yarn_beta_fast = 16.0f;
    apply_rope_overrides(hp, o);
    EXPECT_EQ(hp.yarn_ext_factor, 0.0f);
    EXPECT_EQ(hp.yarn_attn_factor, 1.5f);
    EXPECT_EQ(hp.yarn_beta_fast, 16.0f);
}

TEST(RopeOverrides, AnEngineRotatesByTheBaseItIsGiven) {
    auto logits_after_prompt = [](float freq_base) {
        EngineOptions o;
        o.model_path = LLAMA_TP_TEST_MODEL;
        o.n_ctx = 256;
        o.n_threads = 2;
        o.rope.freq_base = freq_base;
        auto engine = Engine::load(o);
        Batch b;
        for (int32_t p = 0; p < 24; ++p) b.add(1 + (p * 37) % 500, p, 0, p == 23);
        engine->decode(b);
        const float * l = engine->logits(23);
        return std::vector<float>(l, l + engine->info().n_vocab);
    };
    const std::vector<float> model = logits_after_prompt(0.0f), again = logits_after_prompt(0.0f);
    const std::vector<float> other = logits_after_prompt(100.0f);
    float moved = 0.0f;
    for (size_t i = 0; i < model.size(); ++i) moved = std::max(moved, std::fabs(model[i] - other[i]));
    EXPECT_EQ(model, again);
    EXPECT_GT(moved, 1e-3f);
}

}  // namespace
}  // namespace llama_tp
