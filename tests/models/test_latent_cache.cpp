// Latent attention's cache and weights through the engine, on a generated
// deepseek2 in F32 (DeepSeek V3's ratios, eight experts), in the absorbed
// form or the older expanded one: every rank caches one latent row per
// token and layer (expanded: its heads' keys and values); a context shift
// turns only each key's rotated part, to the keys of the new positions; a
// sequence's image restores into another split; and each rank holds its
// share of the split tensors beside the mirrored ones. Usage:
// test-latent-cache MODEL.gguf (gtest flags may follow).

#include "runtime/engine.h"
#include "runtime/kv/kv_image.h"
#include "runtime/model/gguf_file.h"
#include "runtime/model/hparams.h"
#include "runtime/text/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ggml.h"

namespace llama_tp {
namespace {

std::string g_model;

std::unique_ptr<Engine> load(int tp, bool exact = false) {
    EngineOptions o;
    o.model_path = g_model;
    o.n_ctx = 1024;
    o.n_seq_max = 4;
    o.n_threads = 2;
    o.tp = tp;
    o.split_invariant = exact;
    o.progress = false;
    return Engine::load(o);
}

std::vector<int32_t> prompt(const Engine & e) {
    return e.tokenizer().tokenize("The sun was shining and the sky was blue over the green hill by the sea", true,
                                  false);
}

std::vector<float> decode_at(Engine & e, const std::vector<int32_t> & t, int seq, int first) {
    Batch b;
    for (size_t i = 0; i < t.size(); ++i) b.add(t[i], first + (int) i, seq, i + 1 == t.size());
    e.decode(b);
    return std::vector<float>(e.logits((int32_t) t.size() - 1), e.logits((int32_t) t.size() - 1) + e.info().n_vocab);
}

// Layer 0's keys of cells [first, first + n) of a sequence, read as an
// image: per head (one: the latent) its unrotated part, then its rotated part.
std::vector<float> layer0_rows(Engine & e, int seq, int n_cached, int first, int n) {
    const std::vector<uint8_t> image = e.read_sequence(seq, n_cached);
    const KvImageLayout l = KvImageLayout::of(read_hparams(GgufFile(g_model)), e.options().kv_types, n_cached, -1);
    const auto * h = reinterpret_cast<const ggml_fp16_t *>(image.data() + l.offset(0, false, first, 0));
    std::vector<float> out((size_t) n * l.layers[0].k_row_bytes() / sizeof(ggml_fp16_t));
    for (size_t i = 0; i < out.size(); ++i) out[i] = ggml_fp16_to_fp32(h[i]);
    return out;
}

// The largest difference over every key head's unrotated part (rotated
// false) or its rotated part.
float part_diff(const std::vector<float> & a, const std::vector<float> & b, const LayerShape & s, bool rotated) {
    float d = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) {
        if (((int32_t) (i % s.head_dim) >= s.head_dim - s.n_rot) == rotated) d = std::max(d, std::fabs(a[i] - b[i]));
    }
    return d;
}

TEST(LatentCache, EachTokenCachesTheLatentOrItsHeads) {
    const HParams hp = read_hparams(GgufFile(g_model));
    const LatentShape & m = hp.mla;
    EngineOptions o;
    o.model_path = g_model;
    // F16: the latent and its rotated part per layer, keys only; expanded,
    // every head's key and value.
    const uint64_t per_layer = m.expanded ? (uint64_t) hp.n_head * (m.head_k + m.head_v) : (uint64_t) m.cache_row();
    EXPECT_EQ(kv_footprint(o).bytes_per_cell, hp.n_layer * per_layer * 2);
    auto e = load(2);
    const auto p = prompt(*e);
    decode_at(*e, p, 0, 0);
    EXPECT_EQ(e->sequence_image_bytes((int32_t) p.size()), hp.n_layer * per_layer * 2 * p.size());
}

void check_shift(int tp) {
    const LayerShape m = read_hparams(GgufFile(g_model)).layer(0);
    auto e = load(tp);
    const auto p = prompt(*e);
    const int n = (int) p.size(), k = 5;
    decode_at(*e, p, 0, 0);
    e->seq_remove(0, 0, k);
    e->seq_shift(0, k, -1, -k);
    EXPECT_EQ(e->seq_pos_max(0), n - k - 1);
    decode_at(*e, std::vector<int32_t>(p.begin() + k, p.end()), 1, 0);  // the same tokens at the new positions
    decode_at(*e, p, 2, 0);                                             // unshifted
    const std::vector<float> shifted = layer0_rows(*e, 0, n - k, 0, n - k);
    const std::vector<float> fresh = layer0_rows(*e, 1, n - k, 0, n - k);
    const std::vector<float> unrotated = layer0_rows(*e, 2, n, k, n - k);
    // Layer 0's latent (and its expansion) does not depend on the position: the very same values.
    EXPECT_EQ(part_diff(shifted, fresh, m, false), 0.0f) << "tp " << tp;
    float largest = 0.0f;
    for (float x : fresh) largest = std::max(largest, std::fabs(x));
    const float ulp = std::ldexp(1.0f, std::ilogb(largest) - 10);
    const float err = part_diff(shifted, fresh, m, true);
    EXPECT_LE(err, 4 * ulp) << "tp " << tp;
    EXPECT_GT(part_diff(unrotated, fresh, m, true), 20 * std::max(err, ulp)) << "tp " << tp;
}

TEST(LatentCache, AContextShiftTurnsOnlyTheRotatedParts) {
    check_shift(1);
    check_shift(2);
}

TEST(LatentCache, ASequenceImageRestoresIntoAnotherSplit) {
    auto one = load(1, /*exact =*/true);
    const auto p = prompt(*one);
    const int n = (int) p.size() - 1;
    decode_at(*one, std::vector<int32_t>(p.begin(), p.end() - 1), 0, 0);
    const std::vector<float> expected = decode_at(*one, {p.back()}, 0, n);
    const std::vector<uint8_t> image = one->read_sequence(0, n);
    for (int tp : {2, 3}) {
        auto other = load(tp, /*exact =*/true);
        other->write_sequence(1, std::vector<int32_t>(p.begin(), p.end() - 1), image);
        EXPECT_EQ(decode_at(*other, {p.back()}, 1, n), expected) << "tp " << tp;
    }
}

// What each rank holds: every split tensor's share (heads, FFN widths,
// every expert's width, the vocabulary) and every mirrored one whole.
TEST(LatentWeights, EachRankHoldsItsShareBesideTheMirroredTensors) {
    const GgufFile file(g_model);
    const auto mirrored = [](const std::string & name) {
        for (const char * part : {"norm", "attn_q_a.weight", "attn_kv_a_mqa", "ffn_gate_inp", "exp_probs_b"}) {
            if (name.find(part) != std::string::npos) return true;
        }
        return false;
    };
    uint64_t whole = 0, split = 0;
    for (int64_t i = 0; i < file.n_tensors(); ++i) {
        const ggml_tensor * t = file.tensor_at(i);
        if (std::string(t->name).rfind("blk.", 0) == 0 &&
            std::stoi(std::string(t->name).substr(4)) >= read_hparams(file).n_layer) {
            continue;  // a multi-token-prediction layer: not read
        }
        (mirrored(t->name) ? whole : split) += ggml_nbytes(t);
    }
    ASSERT_GT(split, 4 * whole) << "the test model's split tensors should dominate";
    for (int tp : {2, 4}) {
        auto e = load(tp);
        for (uint64_t bytes : e->rank_weight_bytes()) {
            const double expected = (double) whole + (double) split / tp;
            EXPECT_NEAR((double) bytes, expected, 0.02 * (double) (whole + split)) << "tp " << tp;
        }
    }
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
