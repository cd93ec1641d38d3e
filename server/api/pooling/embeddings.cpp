#include "server/api/pooling/embeddings.h"

#include "runtime/text/tokenizer.h"

#include "common.h"

#include <cstring>

namespace llama_tp::server {

namespace {

bool is_token_list(const json & v) {
    if (!v.is_array() || v.empty()) return false;
    for (const auto & t : v) {
        if (!t.is_number_integer()) return false;
    }
    return true;
}

std::vector<int32_t> tokens_of(const json & v, const char * field, const Tokenizer & tok) {
    std::vector<int32_t> out;
    if (v.is_string()) {
        if (v.get<std::string>().empty()) {
            throw bad_request(std::string("'") + field + "' holds an empty string", field, "invalid_value");
        }
        out = tok.tokenize(v.get<std::string>(), true, true);
    } else {
        for (const auto & t : v) {
            const long long id = t.get<long long>();
            if (id < 0 || id >= tok.n_vocab()) {
                throw bad_request(
                    std::string("'") + field + "' holds token " + std::to_string(id) + ", outside the vocabulary",
                    field, "invalid_value");
            }
            out.push_back((int32_t) id);
        }
    }
    if (out.empty()) throw bad_request(std::string("'") + field + "' holds an empty input", field, "invalid_value");
    return out;
}

std::string base64_of(const float * data, size_t n) {
    static const char table[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const auto * b = reinterpret_cast<const unsigned char *>(data);
    const size_t len = n * sizeof(float);
    std::string out;
    for (size_t i = 0; i < len; i += 3) {
        const uint32_t v = (uint32_t) b[i] << 16 | (i + 1 < len ? (uint32_t) b[i + 1] << 8 : 0) |
                           (i + 2 < len ? (uint32_t) b[i + 2] : 0);
        out += table[(v >> 18) & 63];
        out += table[(v >> 12) & 63];
        out += i + 1 < len ? table[(v >> 6) & 63] : '=';
        out += i + 2 < len ? table[v & 63] : '=';
    }
    return out;
}

json row(const EmbeddingResult & r, int32_t i, int32_t n_embd) {
    return json(std::vector<float>(r.rows.begin() + (size_t) i * n_embd, r.rows.begin() + (size_t) (i + 1) * n_embd));
}

}  // namespace

std::vector<std::vector<int32_t>> embedding_inputs(const json & body, const char * field, const Tokenizer & tok) {
    const auto it = body.find(field);
    if (it == body.end() || it->is_null()) {
        throw bad_request(std::string("'") + field + "' is required", field, "missing_required_parameter");
    }
    const json & v = *it;
    std::vector<std::vector<int32_t>> out;
    if (v.is_string() || is_token_list(v)) {
        out.push_back(tokens_of(v, field, tok));
    } else if (v.is_array() && !v.empty()) {
        for (const auto & e : v) {
            if (!e.is_string() && !is_token_list(e)) {
                throw bad_request(std::string("'") + field + "' must be a string, token ids, or an array of them",
                                  field, "invalid_type");
            }
            out.push_back(tokens_of(e, field, tok));
        }
    } else {
        throw bad_request(std::string("'") + field + "' must be a string, token ids, or an array of them", field,
                          "invalid_type");
    }
    if (out.size() > 2048) throw bad_request(std::string("'") + field + "' holds more than 2048 inputs", field);
    return out;
}

void normalize_rows(std::vector<float> & rows, int32_t n_embd, int norm) {
    std::vector<float> tmp(n_embd);
    for (size_t r = 0; r + n_embd <= rows.size(); r += n_embd) {
        common_embd_normalize(rows.data() + r, tmp.data(), n_embd, norm);
        std::memcpy(rows.data() + r, tmp.data(), n_embd * sizeof(float));
    }
}

json openai_embeddings_json(const std::vector<EmbeddingResult> & results, int32_t n_embd, const std::string & model,
                            bool base64) {
    json data = json::array();
    int64_t n_prompt = 0;
    for (size_t i = 0; i < results.size(); ++i) {
        const EmbeddingResult & r = results[i];
        json e = base64 ? json(base64_of(r.rows.data(), (size_t) n_embd)) : row(r, 0, n_embd);
        data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", e}});
        n_prompt += r.n_prompt;
    }
    return {{"object", "list"},
            {"data", data},
            {"model", model},
            {"usage", {{"prompt_tokens", n_prompt}, {"total_tokens", n_prompt}}}};
}

json native_embeddings_json(const std::vector<EmbeddingResult> & results, int32_t n_embd) {
    json out = json::array();
    for (size_t i = 0; i < results.size(); ++i) {
        json rows = json::array();
        for (int32_t k = 0; k < results[i].n_rows; ++k) rows.push_back(row(results[i], k, n_embd));
        out.push_back({{"index", i}, {"embedding", rows}});
    }
    return out;
}

const char * pooling_name(Pooling p) {
    switch (p) {
        case Pooling::None:
            return "none";
        case Pooling::Mean:
            return "mean";
        case Pooling::Cls:
            return "cls";
        case Pooling::Last:
            return "last";
        case Pooling::Rank:
            return "rank";
    }
    return "";
}

}  // namespace llama_tp::server
