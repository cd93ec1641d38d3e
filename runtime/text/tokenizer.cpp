#include "runtime/text/tokenizer.h"

#include "runtime/error.h"
#include "runtime/model/gguf_file.h"
#include "runtime/text/vocabulary_check.h"

#include <cstdio>
#include <mutex>

#include "llama.h"

namespace llama_tp {

namespace {

// libllama logs loader chatter at INFO; keep warnings and errors only.
void quiet_log(ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_WARN && level != GGML_LOG_LEVEL_CONT) fputs(text, stderr);
}

void init_llama_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        llama_backend_init();
        llama_log_set(quiet_log, nullptr);
    });
}

}  // namespace

std::vector<llama_model_kv_override> to_llama_overrides(const std::vector<MetadataOverride> & overrides) {
    std::vector<llama_model_kv_override> out;
    for (const MetadataOverride & o : overrides) {
        llama_model_kv_override k{};
        std::snprintf(k.key, sizeof k.key, "%s", o.key.c_str());
        switch (o.type) {
            case MetadataOverride::Type::Int:
                k.tag = LLAMA_KV_OVERRIDE_TYPE_INT;
                k.val_i64 = o.i;
                break;
            case MetadataOverride::Type::Float:
                k.tag = LLAMA_KV_OVERRIDE_TYPE_FLOAT;
                k.val_f64 = o.f;
                break;
            case MetadataOverride::Type::Bool:
                k.tag = LLAMA_KV_OVERRIDE_TYPE_BOOL;
                k.val_bool = o.b;
                break;
            case MetadataOverride::Type::Str:
                k.tag = LLAMA_KV_OVERRIDE_TYPE_STR;
                std::snprintf(k.val_str, sizeof k.val_str, "%s", o.s.c_str());
                break;
        }
        out.push_back(k);
    }
    out.emplace_back();  // the end: an empty key
    out.back().key[0] = '\0';
    return out;
}

std::vector<MetadataOverride> from_llama_overrides(const std::vector<llama_model_kv_override> & kv) {
    std::vector<MetadataOverride> out;
    for (const llama_model_kv_override & k : kv) {
        if (k.key[0] == '\0') break;  // the end
        MetadataOverride m;
        m.key = k.key;
        switch (k.tag) {
            case LLAMA_KV_OVERRIDE_TYPE_INT:
                m.type = MetadataOverride::Type::Int;
                m.i = k.val_i64;
                break;
            case LLAMA_KV_OVERRIDE_TYPE_FLOAT:
                m.type = MetadataOverride::Type::Float;
                m.f = k.val_f64;
                break;
            case LLAMA_KV_OVERRIDE_TYPE_BOOL:
                m.type = MetadataOverride::Type::Bool;
                m.b = k.val_bool;
                break;
            case LLAMA_KV_OVERRIDE_TYPE_STR:
                m.type = MetadataOverride::Type::Str;
                m.s = k.val_str;
                break;
        }
        out.push_back(m);
    }
    return out;
}

Tokenizer::Tokenizer(const std::string & gguf_path, const std::vector<MetadataOverride> & overrides) {
    // Our reader names what is wrong with a file (or with one part of a split
    // model); libllama's loader would only say that it failed, or assert.
    {
        const GgufFile file(gguf_path, overrides);
        check_vocabulary(file);
    }
    init_llama_once();
    llama_model_params params = llama_model_default_params();
    params.vocab_only = true;
    const std::vector<llama_model_kv_override> kv = to_llama_overrides(overrides);
    if (!overrides.empty()) params.kv_overrides = kv.data();
    model_ = llama_model_load_from_file(gguf_path.c_str(), params);
    if (!model_) throw Error("model file '" + gguf_path + "': could not load its vocabulary (tokenizer.* metadata)");
    vocab_ = llama_model_get_vocab(model_);
}

Tokenizer::~Tokenizer() {
    llama_model_free(model_);
}

std::vector<int32_t> Tokenizer::tokenize(const std::string & text, bool add_special, bool parse_special) const {
    std::vector<int32_t> out(text.size() + 2);
    int32_t n = llama_tokenize(vocab_, text.data(), (int32_t) text.size(), out.data(), (int32_t) out.size(),
                               add_special, parse_special);
    if (n < 0 && n != INT32_MIN) {
        out.resize(-n);
        n = llama_tokenize(vocab_, text.data(), (int32_t) text.size(), out.data(), (int32_t) out.size(), add_special,
                           parse_special);
    }
    if (n < 0) throw Error("text of " + std::to_string(text.size()) + " bytes could not be tokenized");
    out.resize(n);
    return out;
}

std::string Tokenizer::piece(int32_t token, bool special) const {
    char buf[256];
    int32_t n = llama_token_to_piece(vocab_, token, buf, sizeof(buf), 0, special);
    if (n >= 0) return std::string(buf, n);
    std::string big(-n, '\0');
    n = llama_token_to_piece(vocab_, token, big.data(), (int32_t) big.size(), 0, special);
    return n < 0 ? std::string() : big.substr(0, n);
}

std::string Tokenizer::detokenize(const std::vector<int32_t> & tokens, bool special) const {
    std::string out(tokens.size() * 8 + 16, '\0');
    int32_t n = llama_detokenize(vocab_, tokens.data(), (int32_t) tokens.size(), out.data(), (int32_t) out.size(),
                                 false, special);
    if (n < 0) {
        out.resize(-n);
        n = llama_detokenize(vocab_, tokens.data(), (int32_t) tokens.size(), out.data(), (int32_t) out.size(), false,
                             special);
    }
    out.resize(n < 0 ? 0 : n);
    return out;
}

int32_t Tokenizer::n_vocab() const {
    return llama_vocab_n_tokens(vocab_);
}
int32_t Tokenizer::bos() const {
    return llama_vocab_bos(vocab_);
}
int32_t Tokenizer::eos() const {
    return llama_vocab_eos(vocab_);
}
bool Tokenizer::add_bos() const {
    return llama_vocab_get_add_bos(vocab_);
}
Tokenizer::FimTokens Tokenizer::fim() const {
    return {llama_vocab_fim_pre(vocab_), llama_vocab_fim_suf(vocab_), llama_vocab_fim_mid(vocab_),
            llama_vocab_fim_rep(vocab_), llama_vocab_fim_sep(vocab_)};
}

bool Tokenizer::is_eog(int32_t token) const {
    return llama_vocab_is_eog(vocab_, token);
}

std::string Tokenizer::chat_template(const char * name) const {
    const char * tmpl = llama_model_chat_template(model_, name);
    return tmpl ? tmpl : "";
}

bool Tokenizer::add_eos() const {
    return llama_vocab_get_add_eos(vocab_);
}

bool Tokenizer::add_sep() const {
    return llama_vocab_get_add_sep(vocab_);
}

int32_t Tokenizer::sep() const {
    return llama_vocab_sep(vocab_);
}

}  // namespace llama_tp
