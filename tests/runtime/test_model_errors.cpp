#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/model/gguf_file.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf.h"
#include "tests/runtime/gguf_edit.h"

namespace llama_tp {
namespace {

// Loads a model file expecting failure; returns the error message.
std::string load_error(const std::string & path) {
    EngineOptions o;
    o.model_path = path;
    o.n_ctx = 64;
    try {
        Engine::load(o);
    } catch (const Error & e) {
        return e.what();
    }
    return "(loaded without error)";
}

TEST(ModelErrors, MissingFileNamesThePath) {
    const std::string msg = load_error("/nonexistent/model.gguf");
    EXPECT_NE(msg.find("/nonexistent/model.gguf"), std::string::npos) << msg;
}

TEST(ModelErrors, AModelWithoutAPredictionLayerHasNoDraftHead) {
    EngineOptions o;
    o.model_path = LLAMA_TP_TEST_MODEL;
    o.n_ctx = 64;
    o.mtp_head = true;
    std::string msg = "(loaded without error)";
    try {
        Engine::load(o);
    } catch (const Error & e) {
        msg = e.what();
    }
    EXPECT_NE(msg.find("has no multi-token-prediction layer"), std::string::npos) << msg;
    EXPECT_NE(msg.find(LLAMA_TP_TEST_MODEL), std::string::npos) << msg;
}

TEST(ModelErrors, NotAGgufFile) {
    const std::string path = test::temp_path("text.gguf");
    std::ofstream(path) << "this is not a model\n";
    const std::string msg = load_error(path);
    EXPECT_NE(msg.find("not a valid GGUF"), std::string::npos) << msg;
    std::remove(path.c_str());
}

TEST(ModelErrors, TruncatedFileNamesATensor) {
    const std::string path = test::temp_path("truncated.gguf");
    test::truncate_copy(LLAMA_TP_TEST_MODEL, path, 1000000);
    const std::string msg = load_error(path);
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tensor '"), std::string::npos) << msg;
    std::remove(path.c_str());
}

TEST(ModelErrors, MissingTensorIsNamed) {
    const std::string path = test::temp_path("missing.gguf");
    test::copy_gguf(LLAMA_TP_TEST_MODEL, path, nullptr,
                    [](const std::string & n) { return n != "blk.3.ffn_up.weight"; });
    const std::string msg = load_error(path);
    EXPECT_NE(msg.find("missing tensor 'blk.3.ffn_up.weight'"), std::string::npos) << msg;
    std::remove(path.c_str());
}

TEST(ModelErrors, WrongShapeIsNamed) {
    const std::string path = test::temp_path("shape.gguf");
    test::copy_gguf(
        LLAMA_TP_TEST_MODEL, path, [](gguf_context * g) { gguf_set_val_u32(g, "llama.feed_forward_length", 128); },
        [](const std::string &) { return true; });
    const std::string msg = load_error(path);
    EXPECT_NE(msg.find("ffn_gate.weight' has shape"), std::string::npos) << msg;
    std::remove(path.c_str());
}

// Values the loader sizes its tables by are checked against the file before
// anything is sized by them.
TEST(ModelErrors, HyperparametersBeyondTheFileAreRefused) {
    const std::string path = test::temp_path("hparams.gguf");
    const std::pair<std::function<void(gguf_context *)>, std::string> cases[] = {
        {[](gguf_context * g) { gguf_set_val_u32(g, "llama.block_count", 2000000000); },
         "block_count is 2000000000, but the file holds only"},
        {[](gguf_context * g) { gguf_set_val_u64(g, "llama.block_count", (1ull << 32) + 5); },
         "llama.block_count is 4294967301, beyond a 32-bit integer"},
        {[](gguf_context * g) { gguf_set_val_u32(g, "llama.embedding_length", 128); },
         "embedding_length is 128, but token_embd.weight is 64 wide"},
        {[](gguf_context * g) { gguf_set_val_u32(g, "llama.attention.head_count_kv", 3000000000u); },
         "llama.attention.head_count_kv is 3000000000, beyond a 32-bit integer"},
    };
    for (const auto & [edit, expected] : cases) {
        test::copy_gguf(LLAMA_TP_TEST_MODEL, path, edit, [](const std::string &) { return true; });
        const std::string msg = load_error(path);
        EXPECT_NE(msg.find(expected), std::string::npos) << msg;
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
    }
    std::remove(path.c_str());
}

// --check-tensors: each rank checks the values it reads; without it a NaN
// loads (as upstream's loader, which checks nothing by default).
TEST(ModelErrors, InvalidValuesAreNamedWhenChecked) {
    const std::string path = test::temp_path("nan.gguf");
    test::copy_gguf_with_value(LLAMA_TP_TEST_MODEL, path, "blk.2.ffn_down.weight", 5, std::nanf(""));
    for (int tp : {1, 2}) {
        EngineOptions o;
        o.model_path = path;
        o.n_ctx = 64;
        o.tp = tp;
        o.n_threads = 2;
        EXPECT_NO_THROW(Engine::load(o)) << "tp " << tp;
        o.check_tensors = true;
        try {
            Engine::load(o);
            ADD_FAILURE() << "loaded a NaN under check_tensors, tp " << tp;
        } catch (const Error & e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find("tensor 'blk.2.ffn_down.weight' has invalid data"), std::string::npos) << msg;
        }
        o.model_path = LLAMA_TP_TEST_MODEL;
        EXPECT_NO_THROW(Engine::load(o)) << "tp " << tp;
    }
    std::remove(path.c_str());
}

// The vocabulary's tokens, rewritten by `edit`.
void copy_with_tokens(const std::string & path, const std::function<void(std::vector<std::string> &)> & edit,
                      const char * tokenizer_model = nullptr) {
    const GgufFile source(LLAMA_TP_TEST_MODEL);
    std::vector<std::string> tokens = source.get_string_array("tokenizer.ggml.tokens");
    edit(tokens);
    std::vector<const char *> texts;
    for (const std::string & t : tokens) texts.push_back(t.c_str());
    test::copy_gguf(
        LLAMA_TP_TEST_MODEL, path,
        [&](gguf_context * g) {
            gguf_set_arr_str(g, "tokenizer.ggml.tokens", texts.data(), texts.size());
            if (tokenizer_model) gguf_set_val_str(g, "tokenizer.ggml.model", tokenizer_model);
        },
        [](const std::string &) { return true; });
}

// libllama's vocabulary loader asserts (aborting the process) on these.
TEST(ModelErrors, VocabulariesLibllamaAssertsOnAreRefused) {
    const std::string path = test::temp_path("vocab.gguf");
    copy_with_tokens(path, [](std::vector<std::string> & t) { t[7] = t[5]; });
    std::string msg = load_error(path);
    EXPECT_NE(msg.find("tokenizer.ggml.tokens holds '" +
                       GgufFile(LLAMA_TP_TEST_MODEL).get_string_array("tokenizer.ggml.tokens")[5] + "' at ids 5 and 7"),
              std::string::npos)
        << msg;
    // An empty token is "[EMPTY_<id>]" to libllama, and may meet that text.
    copy_with_tokens(path, [](std::vector<std::string> & t) {
        t[9] = "";
        t[10] = "[EMPTY_9]";
    });
    msg = load_error(path);
    EXPECT_NE(msg.find("holds '[EMPTY_9]' at ids 9 and 10"), std::string::npos) << msg;
    copy_with_tokens(path, [](std::vector<std::string> & t) { t[9] = ""; });
    EXPECT_EQ(load_error(path), "(loaded without error)");
    // A WordPiece vocabulary has no byte tokens to decode (stories260K's
    // SentencePiece vocabulary has 256).
    copy_with_tokens(
        path, [](std::vector<std::string> &) {}, "bert");
    msg = load_error(path);
    EXPECT_NE(msg.find("tokenizer.ggml.token_type marks id 3 a byte token"), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    std::remove(path.c_str());
}

TEST(ModelErrors, UnsupportedArchitectureIsNamed) {
    const std::string path = test::temp_path("arch.gguf");
    test::copy_gguf(
        LLAMA_TP_TEST_MODEL, path, [](gguf_context * g) { gguf_set_val_str(g, "general.architecture", "mamba"); },
        [](const std::string &) { return true; });
    const std::string msg = load_error(path);
    EXPECT_NE(msg.find("architecture 'mamba' is not supported"), std::string::npos) << msg;
    EXPECT_NE(
        msg.find("(supported: llama, qwen2, qwen3, qwen3moe, phi3, gemma2, gemma3, gemma4, gpt-oss, qwen35, qwen35moe, "
                 "qwen3next, glm4moe, deepseek2)"),
        std::string::npos)
        << msg;
    std::remove(path.c_str());
}

// Tensors of stories260K's layers 2 to 4.
bool in_second_part(const std::string & name) {
    return name.rfind("blk.", 0) == 0 && name > "blk.2";
}

// stories260K written as two parts the way gguf-split writes them, layers 2
// to 4 in the second part.
struct SplitModel {
    std::string first = test::temp_path("split-00001-of-00002.gguf");
    std::string second = test::temp_path("split-00002-of-00002.gguf");
    int32_t n_tensors = (int32_t) GgufFile(LLAMA_TP_TEST_MODEL).n_tensors();

    SplitModel() {
        write(first, 0, [](const std::string & n) { return !in_second_part(n); });
        write(second, 1, in_second_part);
    }
    ~SplitModel() {
        std::remove(first.c_str());
        std::remove(second.c_str());
    }
    void write(const std::string & path, int no, const std::function<bool(const std::string &)> & keep,
               int32_t tensors_count = 0) {
        test::copy_gguf(
            LLAMA_TP_TEST_MODEL, path,
            [&](gguf_context * g) {
                gguf_set_val_u16(g, "split.no", (uint16_t) no);
                gguf_set_val_u16(g, "split.count", 2);
                gguf_set_val_i32(g, "split.tensors.count", tensors_count ? tensors_count : n_tensors);
            },
            keep);
    }
};

std::vector<float> first_logits(const std::string & path, int tp) {
    EngineOptions o;
    o.model_path = path;
    o.n_ctx = 64;
    o.tp = tp;
    o.n_threads = 2;
    auto e = Engine::load(o);
    Batch b;
    for (int i = 0; i < 6; ++i) b.add(1 + 7 * i, i, 0, i == 5);
    e->decode(b);
    return std::vector<float>(e->logits(5), e->logits(5) + e->info().n_vocab);
}

TEST(SplitModel, LoadsFromItsFirstPartAsTheWholeFile) {
    SplitModel m;
    EXPECT_EQ(GgufFile(m.first).n_parts(), 2);
    EXPECT_EQ(first_logits(m.first, 1), first_logits(LLAMA_TP_TEST_MODEL, 1));
    EXPECT_EQ(first_logits(m.first, 2), first_logits(LLAMA_TP_TEST_MODEL, 2));
}

TEST(SplitModel, ALaterPartNamesTheFirst) {
    SplitModel m;
    const std::string msg = load_error(m.second);
    EXPECT_NE(msg.find("is part 2 of 2 of a split model: give the first part, '" + m.first + "'"), std::string::npos)
        << msg;
}

TEST(SplitModel, AMissingPartIsNamed) {
    SplitModel m;
    std::remove(m.second.c_str());
    const std::string msg = load_error(m.first);
    EXPECT_NE(msg.find("split into 2 files: part 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find(m.second), std::string::npos) << msg;
}

TEST(SplitModel, APartOfAnotherSplitIsRefused) {
    SplitModel m;
    m.write(m.second, 0, in_second_part);
    const std::string msg = load_error(m.first);
    EXPECT_NE(msg.find("is not part 2 of 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("it says it is part 1 of 2"), std::string::npos) << msg;
}

TEST(SplitModel, ARenamedFirstPartSaysWhy) {
    SplitModel m;
    const std::string renamed = test::temp_path("renamed.gguf");
    std::rename(m.first.c_str(), renamed.c_str());
    const std::string msg = load_error(renamed);
    EXPECT_NE(msg.find("does not end in '-00001-of-00002.gguf'"), std::string::npos) << msg;
    std::remove(renamed.c_str());
}

TEST(SplitModel, AWrongTensorCountIsRefused) {
    SplitModel m;
    m.write(
        m.first, 0, [](const std::string & n) { return !in_second_part(n); }, 3);
    const std::string msg = load_error(m.first);
    EXPECT_NE(msg.find("split.tensors.count says 3"), std::string::npos) << msg;
}

TEST(SplitModel, ATensorInTwoPartsIsRefused) {
    SplitModel m;
    m.write(m.second, 1, [](const std::string & n) { return n == "output_norm.weight" || in_second_part(n); });
    const std::string msg = load_error(m.first);
    EXPECT_NE(msg.find("tensor 'output_norm.weight' is also in"), std::string::npos) << msg;
}

}  // namespace
}  // namespace llama_tp
