#pragma once
// Reranking (--rerank): /rerank, /reranking, /v1/rerank, /v1/reranking, in
// Jina's shape (query + documents) or TEI's (query + texts), as llama-server.
// Each document is a prompt made of the query and the document, scored by
// the model's classification head (runtime/model/classifier_head.h).

#include "server/api/request.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace llama_tp {
class Tokenizer;
}

namespace llama_tp::server {

using json = nlohmann::json;

struct RerankRequest {
    std::string query;
    std::vector<std::string> documents;
    int32_t top_n = 0;         // results kept, best first (default: all)
    bool tei = false;          // the body named its documents "texts": TEI's answer shape
    bool return_text = false;  // TEI: each result carries its text
    std::string model;         // as sent; "" when absent
};

// Throws ApiError 400 naming the field.
RerankRequest parse_rerank_request(const json & body);

// The tokens one document is scored on: the model's rerank template
// (tokenizer.chat_template.rerank, {query} and {document} filled in) when
// it has one, else query and document joined by the vocabulary's own
// end-of-text and separator tokens.
std::vector<int32_t> rerank_prompt(const Tokenizer & tok, const std::string & query, const std::string & document);

// scores[i] and n_tokens[i] belong to documents[i].
json rerank_json(const RerankRequest & r, const std::string & model_name, const std::vector<float> & scores,
                 const std::vector<int32_t> & n_tokens);

}  // namespace llama_tp::server
