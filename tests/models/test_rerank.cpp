// A generated Qwen3 reranker (llama-tp-make-model --reranker): the score of
// each document from the engine's final hidden state and the classification
// head, against upstream's LLAMA_POOLING_TYPE_RANK on the same tokens, and
// from two ranks against one. Usage: test-rerank MODEL.gguf

#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"

#include "llama.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace llama_tp {
namespace {

std::string g_model;

const char * const kQuery = "What is the capital of France?";
const std::vector<std::string> kDocuments = {"Paris is the capital of France.", "The dog ran to the park.",
                                             "Berlin is in Germany.", "Once upon a time"};

// The prompt of one document as Qwen3-Reranker's template writes it.
std::string prompt_of(const std::string & document) {
    return std::string("<|im_start|>user\n<Query>: ") + kQuery + "\n<Document>: " + document +
           "<|im_end|>\n<|im_start|>assistant\n";
}

std::vector<std::vector<int32_t>> prompts(const Tokenizer & tok) {
    std::vector<std::vector<int32_t>> out;
    for (const std::string & d : kDocuments) out.push_back(tok.tokenize(prompt_of(d), false, true));
    return out;
}

std::unique_ptr<Engine> load(int tp, bool embeddings = true) {
    EngineOptions o;
    o.model_path = g_model;
    o.n_ctx = 256;
    o.n_threads = 2;
    o.tp = tp;
    o.embeddings = embeddings;
    o.progress = false;
    return Engine::load(o);
}

std::vector<float> engine_scores(Engine & e, const std::vector<std::vector<int32_t>> & docs) {
    const ClassifierHead * head = e.classifier();
    EXPECT_NE(head, nullptr);
    if (head == nullptr) return {};
    std::vector<float> out;
    for (const auto & t : docs) {
        Batch b;
        for (size_t i = 0; i < t.size(); ++i) b.add(t[i], (int) i, 0, i + 1 == t.size());
        e.decode(b);
        out.push_back(head->apply(e.embedding((int) t.size() - 1))[0]);
        e.seq_remove(0, 0, -1);
    }
    return out;
}

struct ModelFree {
    void operator()(llama_model * m) const { llama_model_free(m); }
};
struct ContextFree {
    void operator()(llama_context * c) const { llama_free(c); }
};

std::vector<float> upstream_scores(const std::vector<std::vector<int32_t>> & docs) {
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    std::unique_ptr<llama_model, ModelFree> model(llama_model_load_from_file(g_model.c_str(), mp));
    EXPECT_NE(model, nullptr);
    if (!model) return {};
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.embeddings = true;
    cp.pooling_type = LLAMA_POOLING_TYPE_RANK;
    std::unique_ptr<llama_context, ContextFree> ctx(llama_init_from_model(model.get(), cp));
    EXPECT_NE(ctx, nullptr);
    if (!ctx) return {};
    EXPECT_EQ(llama_model_n_cls_out(model.get()), 2u);
    std::vector<float> out;
    for (auto t : docs) {
        EXPECT_EQ(llama_decode(ctx.get(), llama_batch_get_one(t.data(), (int32_t) t.size())), 0);
        out.push_back(llama_get_embeddings_seq(ctx.get(), 0)[0]);
        llama_memory_clear(llama_get_memory(ctx.get()), true);
    }
    return out;
}

float max_diff(const std::vector<float> & a, const std::vector<float> & b) {
    EXPECT_EQ(a.size(), b.size());
    float m = 0.0f;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

TEST(Rerank, ScoresAreUpstreamsRankPoolingOfTheSameTokens) {
    auto e = load(1);
    const auto docs = prompts(e->tokenizer());
    const std::vector<float> ours = engine_scores(*e, docs);
    const std::vector<float> theirs = upstream_scores(docs);
    // Both caches hold K and V in f16 but round at different points of the
    // split graph, so the scores differ by up to about 1e-4.
    EXPECT_LT(max_diff(ours, theirs), 5e-4f);
    float lo = 1.0f, hi = 0.0f;
    for (float s : ours) {
        EXPECT_GT(s, 0.0f);
        EXPECT_LT(s, 1.0f);  // a probability: the softmax of "yes" and "no"
        lo = std::min(lo, s);
        hi = std::max(hi, s);
    }
    EXPECT_GT(hi - lo, 1e-3f) << "the documents should not all score alike";
}

TEST(Rerank, TwoRanksScoreAsOne) {
    auto one = load(1);
    auto two = load(2);
    const auto docs = prompts(one->tokenizer());
    EXPECT_LT(max_diff(engine_scores(*one, docs), engine_scores(*two, docs)), 1e-4f);
}

TEST(Rerank, TheHeadIsReadOnlyForEmbeddings) {
    EXPECT_EQ(load(1, false)->classifier(), nullptr);
}

}  // namespace
}  // namespace llama_tp

int main(int argc, char ** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    if (argc < 2) {
        std::fprintf(stderr, "usage: test-rerank MODEL.gguf\n");
        return 2;
    }
    llama_tp::g_model = argv[1];
    return RUN_ALL_TESTS();
}
