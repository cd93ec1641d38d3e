#include "runtime/text/vocabulary_check.h"

#include "runtime/error.h"
#include "runtime/model/gguf_file.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace llama_tp {

namespace {

constexpr const char * kTokens = "tokenizer.ggml.tokens";
constexpr const char * kTokenTypes = "tokenizer.ggml.token_type";
constexpr int64_t kByteToken = 6;  // llama_token_type's LLAMA_TOKEN_TYPE_BYTE

void check_distinct(const GgufFile & file, const std::vector<std::string> & tokens) {
    std::unordered_map<std::string, size_t> first;
    first.reserve(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
        const std::string text = tokens[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : tokens[i];
        const auto [at, added] = first.emplace(text, i);
        if (!added) {
            throw Error("model file '" + file.path() + "': " + kTokens + " holds '" + text.substr(0, 64) + "' at ids " +
                        std::to_string(at->second) + " and " + std::to_string(i) +
                        "; a vocabulary's tokens must be distinct");
        }
    }
}

void check_no_byte_tokens(const GgufFile & file) {
    if (!file.has_key(kTokenTypes)) return;
    const std::vector<int64_t> types = file.get_int_array(kTokenTypes);
    for (size_t i = 0; i < types.size(); ++i) {
        if (types[i] == kByteToken) {
            throw Error("model file '" + file.path() + "': " + kTokenTypes + " marks id " + std::to_string(i) +
                        " a byte token, which a WordPiece ('bert') vocabulary cannot hold");
        }
    }
}

}  // namespace

void check_vocabulary(const GgufFile & file) {
    // A file without tokens is libllama's to refuse: it does so cleanly.
    if (!file.has_key(kTokens)) return;
    check_distinct(file, file.get_string_array(kTokens));
    if (file.get_string("tokenizer.ggml.model", "") == "bert") check_no_byte_tokens(file);
}

}  // namespace llama_tp
