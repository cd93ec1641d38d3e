// A model's multi-token-prediction layer as a draft head, against upstream's
// own MTP context on the same file (a generated qwen35, qwen35moe or
// qwen3next in F32 with one nextn layer): the trunk's final-normed hidden
// state of every batch row, the head's logits over (token, hidden state
// before it) pairs and a second step chained on the head's own hidden
// state; the head split over two ranks as on one. Usage: test-mtp-head MODEL.gguf (gtest flags
// may follow).

#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "llama-ext.h"
#include "llama.h"

namespace llama_tp {
namespace {

std::string g_model;

constexpr int kThreads = 2;

std::unique_ptr<Engine> load(bool mtp_head, int tp = 1) {
    EngineOptions o;
    o.model_path = g_model;
    o.n_ctx = 256;
    o.n_threads = kThreads;
    o.tp = tp;
    o.keep_hidden = true;
    o.mtp_head = mtp_head;
    o.split_invariant = false;
    o.progress = false;
    return Engine::load(o);
}

std::vector<int32_t> prompt(const Engine & e) {
    return e.tokenizer().tokenize("Once upon a time a little fox found a red ball in the tall grass by the river", true,
                                  false);
}

std::vector<double> softmax(const float * logits, int32_t n) {
    const float top = *std::max_element(logits, logits + n);
    std::vector<double> p(n);
    double sum = 0.0;
    for (int32_t i = 0; i < n; ++i) sum += p[i] = std::exp((double) logits[i] - top);
    for (double & v : p) v /= sum;
    return p;
}

// Largest difference of two rows' probabilities; also whether their most
// likely tokens agree.
double max_dp(const float * a, const float * b, int32_t n, bool & same_top) {
    const std::vector<double> pa = softmax(a, n), pb = softmax(b, n);
    double d = 0.0;
    for (int32_t i = 0; i < n; ++i) d = std::max(d, std::fabs(pa[i] - pb[i]));
    same_top = std::max_element(a, a + n) - a == std::max_element(b, b + n) - b;
    return d;
}

// Upstream's target and MTP contexts over the same file (llama-server's
// --spec-type draft-mtp sets them up so).
class Upstream {
  public:
    Upstream() {
        llama_model_params mp = llama_model_default_params();
        mp.load_mtp = true;
        model_ = llama_model_load_from_file(g_model.c_str(), mp);
        if (!model_) throw Error("upstream cannot load " + g_model);
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 256;
        cp.n_batch = cp.n_ubatch = 256;
        cp.n_threads = cp.n_threads_batch = kThreads;
        target_ = llama_init_from_model(model_, cp);
        cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
        mtp_ = llama_init_from_model(model_, cp);
        if (!target_ || !mtp_) throw Error("upstream cannot create its contexts");
        llama_set_embeddings_nextn(target_, true, /*masked =*/false);
        llama_set_embeddings_nextn(mtp_, true, /*masked =*/true);
    }
    ~Upstream() {
        if (mtp_) llama_free(mtp_);
        if (target_) llama_free(target_);
        if (model_) llama_model_free(model_);
    }

    // The trunk over tokens at positions 0.., every row's hidden state kept.
    void decode_target(std::vector<int32_t> tokens) {
        Rows r(tokens, 0, nullptr);
        ASSERT_EQ(llama_decode(target_, r.batch), 0);
    }
    const float * target_hidden(int i) const { return llama_get_embeddings_nextn_ith(target_, i); }

    // The head over tokens at positions first.. with hidden states h (n_embd each), every row's logits.
    void decode_mtp(std::vector<int32_t> tokens, int32_t first, const std::vector<float> & h) {
        Rows r(tokens, first, &h);
        ASSERT_EQ(llama_decode(mtp_, r.batch), 0);
    }
    const float * mtp_logits(int i) const { return llama_get_logits_ith(mtp_, i); }
    const float * mtp_hidden(int i) const { return llama_get_embeddings_nextn_ith(mtp_, i); }

  private:
    // A llama_batch over vectors this holds: tokens, and hidden states where given.
    struct Rows {
        Rows(std::vector<int32_t> & tokens, int32_t first, const std::vector<float> * h)
            : pos(tokens.size()), n_seq(tokens.size(), 1), seq0(1, 0), seqs(tokens.size()), out(tokens.size(), 1) {
            for (size_t i = 0; i < tokens.size(); ++i) {
                pos[i] = first + (int32_t) i;
                seqs[i] = seq0.data();
            }
            if (h) embd = *h;
            batch = {(int32_t) tokens.size(),
                     tokens.data(),
                     h ? embd.data() : nullptr,
                     pos.data(),
                     n_seq.data(),
                     seqs.data(),
                     out.data()};
        }
        std::vector<llama_pos> pos;
        std::vector<int32_t> n_seq;
        std::vector<llama_seq_id> seq0;
        std::vector<llama_seq_id *> seqs;
        std::vector<int8_t> out;
        std::vector<float> embd;
        llama_batch batch{};
    };

    llama_model * model_ = nullptr;
    llama_context * target_ = nullptr;
    llama_context * mtp_ = nullptr;
};

// The head's input for tokens at positions 0..n-1: each token with the
// trunk's hidden state of the position before it (zeros before the first).
std::vector<float> shifted(const std::vector<float> & hidden_rows, size_t n, int32_t n_embd) {
    std::vector<float> h((size_t) n * n_embd, 0.0f);
    std::copy(hidden_rows.begin(), hidden_rows.begin() + (ptrdiff_t) (n - 1) * n_embd, h.begin() + n_embd);
    return h;
}

Batch head_batch(const std::vector<int32_t> & tokens, int32_t first, const std::vector<float> & h) {
    Batch b;
    for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], first + (int32_t) i, 0, true);
    b.embd = h;
    return b;
}

TEST(MtpHead, HiddenStatesAndDraftLogitsMatchUpstream) {
    auto target = load(false);
    auto head = load(true);
    const std::vector<int32_t> tokens = prompt(*target);
    const size_t n = tokens.size();
    const int32_t E = target->info().n_embd, V = target->info().n_vocab;
    ASSERT_GE(n, 8u);

    Upstream up;
    up.decode_target(tokens);
    Batch b;
    for (size_t i = 0; i < n; ++i) b.add(tokens[i], (int32_t) i, 0, i + 1 == n);
    target->decode(b);
    std::vector<float> up_h;
    double dh = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const float *o = target->hidden((int32_t) i), *u = up.target_hidden((int) i);
        ASSERT_NE(u, nullptr);
        for (int32_t k = 0; k < E; ++k) dh = std::max(dh, (double) std::fabs(o[k] - u[k]));
        up_h.insert(up_h.end(), u, u + E);
    }
    EXPECT_LT(dh, 1e-3) << "the trunk's hidden states differ from upstream's";

    // Every position's pair, as upstream's driver feeds its MTP context; both
    // heads read upstream's hidden states, so that this checks the head alone.
    up.decode_mtp(tokens, 0, shifted(up_h, n, E));
    head->decode(head_batch(tokens, 0, shifted(up_h, n, E)));
    for (size_t i = 0; i < n; ++i) {
        bool same_top = false;
        EXPECT_LT(max_dp(head->logits((int32_t) i), up.mtp_logits((int) i), V, same_top), 1e-3) << "row " << i;
        EXPECT_TRUE(same_top) << "row " << i;
    }

    // A second draft step: the first draft after the last token, with the
    // head's own hidden state of that position (ours against upstream's;
    // both steps then read upstream's).
    const float * last = head->logits((int32_t) n - 1);
    const int32_t draft = (int32_t) (std::max_element(last, last + V) - last);
    const float * ours_next = head->hidden((int32_t) n - 1);
    const std::vector<float> up_next(up.mtp_hidden((int) n - 1), up.mtp_hidden((int) n - 1) + E);
    double dn = 0.0;
    for (int32_t k = 0; k < E; ++k) dn = std::max(dn, (double) std::fabs(ours_next[k] - up_next[k]));
    EXPECT_LT(dn, 1e-3) << "the head's hidden state differs from upstream's";
    up.decode_mtp({draft}, (int32_t) n, up_next);
    head->decode(head_batch({draft}, (int32_t) n, up_next));
    bool same_top = false;
    EXPECT_LT(max_dp(head->logits(0), up.mtp_logits(0), V, same_top), 1e-3);
    EXPECT_TRUE(same_top);
}

TEST(MtpHead, TwoRanksDraftAsOne) {
    auto target = load(false);
    const std::vector<int32_t> tokens = prompt(*target);
    const size_t n = tokens.size();
    const int32_t E = target->info().n_embd, V = target->info().n_vocab;
    Batch b;
    for (size_t i = 0; i < n; ++i) b.add(tokens[i], (int32_t) i, 0, i + 1 == n);
    target->decode(b);
    std::vector<float> h;
    for (size_t i = 0; i < n; ++i) h.insert(h.end(), target->hidden((int32_t) i), target->hidden((int32_t) i) + E);
    auto one = load(true, 1);
    auto two = load(true, 2);
    one->decode(head_batch(tokens, 0, shifted(h, n, E)));
    two->decode(head_batch(tokens, 0, shifted(h, n, E)));
    for (size_t i = 0; i < n; ++i) {
        bool same_top = false;
        EXPECT_LT(max_dp(two->logits((int32_t) i), one->logits((int32_t) i), V, same_top), 1e-4) << "row " << i;
        EXPECT_TRUE(same_top) << "row " << i;
    }
}

TEST(MtpHead, BatchesWithoutHiddenStatesAreRefused) {
    auto head = load(true);
    Batch b;
    b.add(1, 0, 0, true);
    EXPECT_THROW(head->decode(b), Error);
    b.embd.assign((size_t) head->info().n_embd + 1, 0.0f);
    EXPECT_THROW(head->decode(b), Error);
    auto target = load(false);
    b.embd.assign((size_t) head->info().n_embd, 0.0f);
    EXPECT_THROW(target->decode(b), Error) << "the trunk takes no hidden states";
}

}  // namespace
}  // namespace llama_tp

int main(int argc, char ** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    if (argc < 2) {
        std::fprintf(stderr, "usage: test-mtp-head MODEL.gguf [gtest flags]\n");
        return 2;
    }
    llama_tp::g_model = argv[1];
    llama_backend_init();
    const int rc = RUN_ALL_TESTS();
    llama_backend_free();
    return rc;
}
