#include "plugin/engine.h"
#include "plugin/error.h"

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "gguf.h"
#include "tests/gguf_edit.h"

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

TEST(ModelErrors, UnsupportedArchitectureIsNamed) {
    const std::string path = test::temp_path("arch.gguf");
    test::copy_gguf(
        LLAMA_TP_TEST_MODEL, path, [](gguf_context * g) { gguf_set_val_str(g, "general.architecture", "mamba"); },
        [](const std::string &) { return true; });
    const std::string msg = load_error(path);
    EXPECT_NE(msg.find("architecture 'mamba' is not supported"), std::string::npos) << msg;
    std::remove(path.c_str());
}

}  // namespace
}  // namespace llama_tp
