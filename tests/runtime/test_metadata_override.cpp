// --override-kv: metadata read in place of the model file's, by the weights'
// loader and by the tokenizer (libllama), and every malformed override named.

#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/model/gguf_file.h"
#include "runtime/text/tokenizer.h"

#include <gtest/gtest.h>

#include "llama.h"

namespace llama_tp {
namespace {

TEST(MetadataOverride, ParsesEachType) {
    const MetadataOverride i = MetadataOverride::parse("llama.context_length=int:777");
    EXPECT_EQ(i.key, "llama.context_length");
    EXPECT_EQ(i.type, MetadataOverride::Type::Int);
    EXPECT_EQ(i.i, 777);
    EXPECT_EQ(MetadataOverride::parse("a.b=float:0.25").f, 0.25);
    EXPECT_TRUE(MetadataOverride::parse("a.b=bool:true").b);
    EXPECT_FALSE(MetadataOverride::parse("a.b=bool:false").b);
    EXPECT_EQ(MetadataOverride::parse("a.b=str:x:y").s, "x:y");
    EXPECT_EQ(MetadataOverride::parse("a.b=int:-3").describe(), "a.b=int:-3");
}

TEST(MetadataOverride, LibllamasFormKeepsEveryType) {
    const std::vector<MetadataOverride> given = {
        MetadataOverride::parse("a.i=int:-3"), MetadataOverride::parse("a.f=float:0.5"),
        MetadataOverride::parse("a.b=bool:true"), MetadataOverride::parse("a.s=str:text")};
    const std::vector<MetadataOverride> back = from_llama_overrides(to_llama_overrides(given));
    ASSERT_EQ(back.size(), given.size());
    for (size_t i = 0; i < given.size(); ++i) EXPECT_EQ(back[i].describe(), given[i].describe());
}

TEST(MetadataOverride, MalformedOnesSayWhy) {
    const std::pair<const char *, const char *> cases[] = {
        {"no-equals", "KEY=TYPE:VALUE"}, {"=int:1", "KEY=TYPE:VALUE"},
        {"a=int", "KEY=TYPE:VALUE"},     {"a=int:x", "is not an int"},
        {"a=int:", "is not an int"},     {"a=float:1.5x", "is not a float"},
        {"a=bool:yes", "true or false"}, {"a=long:1", "int, float, bool or str"},
    };
    for (const auto & [text, why] : cases) {
        try {
            MetadataOverride::parse(text);
            ADD_FAILURE() << text << " parsed";
        } catch (const Error & e) {
            EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << text << ": " << e.what();
        }
    }
}

TEST(MetadataOverride, TheFileReadsTheOverride) {
    const GgufFile plain(LLAMA_TP_TEST_MODEL);
    const int64_t n_ctx = plain.get_int("llama.context_length");
    const GgufFile file(LLAMA_TP_TEST_MODEL, {MetadataOverride::parse("llama.context_length=int:777"),
                                              MetadataOverride::parse("llama.embedding_length=str:wide"),
                                              MetadataOverride::parse("made.up=float:2.5")});
    EXPECT_EQ(file.get_int("llama.context_length"), 777);
    EXPECT_NE(n_ctx, 777);
    // Of another type than the file's value: dropped, as upstream drops it.
    EXPECT_EQ(file.get_int("llama.embedding_length"), plain.get_int("llama.embedding_length"));
    // A key the file lacks is added.
    EXPECT_FALSE(plain.has_key("made.up"));
    EXPECT_TRUE(file.has_key("made.up"));
    EXPECT_EQ(file.get_float("made.up"), 2.5);
    EXPECT_THROW(file.get_string("made.up"), Error);
    // Read as another type: ignored, so the reader's fallback stands.
    EXPECT_EQ(file.get_int("made.up", 7), 7);
}

TEST(MetadataOverride, TheEngineAndTheTokenizerTakeThem) {
    const bool add_bos = Tokenizer(LLAMA_TP_TEST_MODEL).add_bos();
    const MetadataOverride bos =
        MetadataOverride::parse(std::string("tokenizer.ggml.add_bos_token=bool:") + (add_bos ? "false" : "true"));
    EXPECT_EQ(Tokenizer(LLAMA_TP_TEST_MODEL, {bos}).add_bos(), !add_bos);
    for (int tp : {1, 2}) {
        EngineOptions o;
        o.model_path = LLAMA_TP_TEST_MODEL;
        o.n_ctx = 64;
        o.tp = tp;
        o.n_threads = 2;
        o.metadata_overrides = {MetadataOverride::parse("llama.context_length=int:777"), bos};
        auto e = Engine::load(o);
        EXPECT_EQ(e->info().n_ctx_train, 777) << "tp " << tp;
        EXPECT_EQ(e->tokenizer().add_bos(), !add_bos) << "tp " << tp;
    }
}

}  // namespace
}  // namespace llama_tp
