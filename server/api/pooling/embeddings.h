#pragma once
// Embeddings (--embeddings): the inputs of /v1/embeddings (OpenAI's shape) and
// /embedding, /embeddings (llama-server's), each run as a prompt whose final
// hidden states are pooled (--pooling) and normalised (--embd-normalize).

#include "server/api/request.h"
#include "server/serving/task.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace llama_tp {
class Tokenizer;
}

namespace llama_tp::server {

using json = nlohmann::json;

// The token lists a body's `field` (input / content) asks to embed: a string,
// an array of token ids, or an array of strings or token-id arrays. Throws
// ApiError 400 naming the field.
std::vector<std::vector<int32_t>> embedding_inputs(const json & body, const char * field, const Tokenizer & tok);

// llama-server's normalisations (-1 none, 0 max-abs to int16, 1 taxicab, 2
// euclidean, > 2 p-norm), row by row.
void normalize_rows(std::vector<float> & rows, int32_t n_embd, int norm);

struct EmbeddingResult {
    std::vector<float> rows;  // n_rows x n_embd
    int32_t n_rows = 0;
    int32_t n_prompt = 0;
};

json openai_embeddings_json(const std::vector<EmbeddingResult> & results, int32_t n_embd, const std::string & model,
                            bool base64);
json native_embeddings_json(const std::vector<EmbeddingResult> & results, int32_t n_embd);

const char * pooling_name(Pooling p);

}  // namespace llama_tp::server
