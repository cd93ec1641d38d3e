// LoRA adapters in the engine: per-token scales, and every adapter file
// that cannot apply refused with a message naming what is wrong.

#include "runtime/engine.h"
#include "runtime/error.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

#include <gtest/gtest.h>

#include "ggml.h"
#include "gguf.h"
#include "tests/runtime/gguf_edit.h"

namespace llama_tp {
namespace {

// An adapter for the test model: a rank-4 pair of seeded values for each of
// `targets` (base tensor name -> [in, out]), with metadata `edit` may change.
std::string write_adapter(const std::string & name, const std::map<std::string, std::pair<int64_t, int64_t>> & targets,
                          const std::function<void(gguf_context *)> & edit = nullptr, const std::string & left_out = "",
                          int64_t rank = 4) {
    const std::string path = test::temp_path(name);
    ggml_init_params params = {64u << 20, nullptr, false};
    ggml_context * ctx = ggml_init(params);
    gguf_context * out = gguf_init_empty();
    gguf_set_val_str(out, "general.architecture", "llama");
    gguf_set_val_str(out, "general.type", "adapter");
    gguf_set_val_str(out, "adapter.type", "lora");
    gguf_set_val_f32(out, "adapter.lora.alpha", 8.0f);
    uint32_t state = 12345;
    auto next = [&] {
        state = state * 1664525u + 1013904223u;
        return ((float) (state >> 8) / (float) (1u << 24) - 0.5f) * 0.5f;
    };
    for (const auto & [base, shape] : targets) {
        for (const bool is_a : {true, false}) {
            ggml_tensor * t = is_a ? ggml_new_tensor_2d(ctx, GGML_TYPE_F32, shape.first, rank)
                                   : ggml_new_tensor_2d(ctx, GGML_TYPE_F32, rank, shape.second);
            ggml_set_name(t, (base + (is_a ? ".lora_a" : ".lora_b")).c_str());
            for (int64_t i = 0; i < ggml_nelements(t); ++i) ((float *) t->data)[i] = next();
            if (ggml_get_name(t) != left_out) gguf_add_tensor(out, t);
        }
    }
    if (edit) edit(out);
    EXPECT_TRUE(gguf_write_to_file(out, path.c_str(), false));
    gguf_free(out);
    ggml_free(ctx);
    return path;
}

// The test model's first query projection and its last layer's FFN (where
// only the output rows go on), [in, out], as its file has them.
std::map<std::string, std::pair<int64_t, int64_t>> model_targets() {
    std::map<std::string, std::pair<int64_t, int64_t>> targets;
    ggml_context * meta = nullptr;
    gguf_init_params params = {true, &meta};
    gguf_context * g = gguf_init_from_file(LLAMA_TP_TEST_MODEL, params);
    const std::string last = "blk." + std::to_string(gguf_get_val_u32(g, gguf_find_key(g, "llama.block_count")) - 1);
    for (const std::string & name : {std::string("blk.0.attn_q.weight"), last + ".ffn_up.weight",
                                     last + ".ffn_down.weight", last + ".attn_output.weight"}) {
        const ggml_tensor * t = ggml_get_tensor(meta, name.c_str());
        targets[name] = {t->ne[0], t->ne[1]};
    }
    gguf_free(g);
    ggml_free(meta);
    return targets;
}

std::unique_ptr<Engine> load(const std::vector<LoraOptions> & loras, int tp = 1, bool split_invariant = false) {
    EngineOptions o;
    o.model_path = LLAMA_TP_TEST_MODEL;
    o.n_ctx = 256;
    o.n_seq_max = 2;
    o.n_threads = 2;
    o.tp = tp;
    o.split_invariant = split_invariant;
    o.loras = loras;
    return Engine::load(o);
}

std::string load_error(const std::string & adapter) {
    try {
        load({{adapter, 1.0f}});
    } catch (const Error & e) {
        return e.what();
    }
    return "(loaded without error)";
}

// Two sequences of four tokens in one batch, sequence s at scales[s].
Batch two_sequences(const std::vector<float> & scales) {
    Batch b;
    for (int s = 0; s < 2; ++s) {
        for (int i = 0; i < 4; ++i) {
            b.add(10 + 7 * i + s, i, s, i == 3);
            b.lora.push_back(scales[s]);
        }
    }
    return b;
}

std::vector<float> logits(Engine & e, const Batch & b, int row) {
    e.decode(b);
    const float * l = e.logits(row);
    return std::vector<float>(l, l + e.info().n_vocab);
}

class Lora : public ::testing::Test {
  protected:
    void SetUp() override {
        targets_ = model_targets();
        targets_.erase("output.weight");  // stories260K ties its head
        adapter_ = write_adapter("lora.gguf", targets_);
    }
    void TearDown() override { std::remove(adapter_.c_str()); }
    std::map<std::string, std::pair<int64_t, int64_t>> targets_;
    std::string adapter_;
};

// Logits of both sequences' last tokens, from an empty cache.
std::pair<std::vector<float>, std::vector<float>> both(Engine & e, const Batch & b) {
    e.seq_remove(0, 0, -1);
    e.seq_remove(1, 0, -1);
    std::vector<float> first = logits(e, b, 3);
    const float * l = e.logits(7);
    return {first, std::vector<float>(l, l + e.info().n_vocab)};
}

TEST_F(Lora, EachTokenTakesItsOwnScale) {
    const auto e = load({{adapter_, 1.0f}});
    const auto off = both(*e, two_sequences({0.0f, 0.0f}));  // the model alone
    const auto on = both(*e, two_sequences({1.0f, 1.0f}));
    EXPECT_NE(off.first, on.first) << "the adapter changes nothing";
    EXPECT_NE(off.second, on.second) << "the adapter changes nothing";
    // Sequence 0 without the adapter, sequence 1 with it, in one batch.
    const auto mixed = both(*e, two_sequences({0.0f, 1.0f}));
    EXPECT_EQ(mixed.first, off.first);
    EXPECT_EQ(mixed.second, on.second);
    // A batch without scales takes the load scale.
    Batch plain = two_sequences({0.0f, 0.0f});
    plain.lora.clear();
    EXPECT_EQ(both(*e, plain), on);
    // Half the scale is not the same change.
    EXPECT_NE(both(*e, two_sequences({0.5f, 0.5f})).first, on.first);
}

float max_abs_diff(const std::vector<float> & a, const std::vector<float> & b) {
    float m = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

// The test model's FFN width does not split on ggml's row tiles, so its
// ranks differ from one device by rounding (the architecture matrix checks
// identical logits on shapes that split); the adapter's change is far larger.
TEST_F(Lora, TensorParallelRanksApplyTheirShareOfTheAdapter) {
    const Batch b = two_sequences({0.5f, -1.0f});
    const auto one = load({{adapter_, 1.0f}});
    const std::vector<float> expected = logits(*one, b, 7);
    for (int tp : {2, 4}) {
        const auto split = load({{adapter_, 1.0f}}, tp, true);
        const std::vector<float> got = logits(*split, b, 7);
        EXPECT_LT(max_abs_diff(got, expected), 1e-2f) << "tp " << tp;
        split->seq_remove(0, 0, -1);
        split->seq_remove(1, 0, -1);
        EXPECT_GT(max_abs_diff(logits(*split, two_sequences({0.0f, 0.0f}), 7), got), 0.1f) << "tp " << tp;
    }
}

TEST_F(Lora, BatchWithTheWrongNumberOfScalesIsRefused) {
    const auto e = load({{adapter_, 1.0f}});
    Batch b = two_sequences({1.0f, 1.0f});
    b.lora.pop_back();
    EXPECT_THROW(e->decode(b), Error);
}

TEST(LoraErrors, AdapterFilesThatCannotApplyAreNamed) {
    auto targets = model_targets();
    targets.erase("output.weight");
    const int64_t E = targets.at("blk.0.attn_q.weight").first;
    struct Case {
        const char * file;
        std::map<std::string, std::pair<int64_t, int64_t>> targets;
        std::function<void(gguf_context *)> edit;
        const char * expected;
    };
    const std::vector<Case> cases = {
        {"arch.gguf", targets, [](gguf_context * g) { gguf_set_val_str(g, "general.architecture", "qwen2"); },
         "made for architecture 'qwen2'"},
        {"type.gguf", targets, [](gguf_context * g) { gguf_set_val_str(g, "general.type", "model"); },
         "general.type is not 'adapter'"},
        {"kind.gguf", targets, [](gguf_context * g) { gguf_set_val_str(g, "adapter.type", "control_vector"); },
         "adapter.type is not 'lora'"},
        {"lacks.gguf", {{"blk.9.attn_q.weight", {E, E}}}, nullptr, "'blk.9.attn_q.weight', which the model lacks"},
        {"embd.gguf", {{"token_embd.weight", {E, 512}}}, nullptr, "applies LoRA to the attention projections"},
        {"shape.gguf", {{"blk.0.attn_q.weight", {E + 1, E}}}, nullptr, "another base model?"},
    };
    for (const Case & c : cases) {
        const std::string path = write_adapter(c.file, c.targets, c.edit);
        const std::string msg = load_error(path);
        EXPECT_NE(msg.find(c.expected), std::string::npos) << c.file << ": " << msg;
        EXPECT_NE(msg.find(path), std::string::npos) << c.file << ": " << msg;
        std::remove(path.c_str());
    }
    const std::string half = write_adapter("half.gguf", targets, nullptr, "blk.0.attn_q.weight.lora_b");
    const std::string msg = load_error(half);
    EXPECT_NE(msg.find("'blk.0.attn_q.weight' lacks its lora_a or lora_b"), std::string::npos) << msg;
    std::remove(half.c_str());
    const std::string missing = load_error("/nonexistent/adapter.gguf");
    EXPECT_NE(missing.find("LoRA adapter"), std::string::npos) << missing;
    EXPECT_NE(missing.find("/nonexistent/adapter.gguf"), std::string::npos) << missing;
}

}  // namespace
}  // namespace llama_tp
