#include "server/routes/handlers.h"

#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "server/http/http_access.h"
#include "server/api/pooling/embeddings.h"
#include "server/api/pooling/rerank.h"
#include "server/serving/generation.h"

#include <cpp-httplib/httplib.h>

// Pooled outputs (--embeddings, --rerank): embeddings in OpenAI's and
// llama-server's shapes, and documents scored against a query.

namespace llama_tp::server {

using httplib::Request;
using httplib::Response;

namespace {

// /v1/embeddings (oai) and /embedding, /embeddings.
void answer_embeddings(ServerState & st, const Request & req, Response & res, bool oai) {
    if (!st.opts.embeddings || st.opts.pooling == Pooling::Rank) {
        throw not_supported(
            "This server does not support embeddings. Start it with `--embeddings` and without `--rerank`");
    }
    const json body = parse_json_body(req.body);
    if (oai && st.opts.pooling == Pooling::None) {
        throw bad_request("Pooling type 'none' is not OAI compatible. Please use a different pooling type", "", "");
    }
    const std::string format = body.value("encoding_format", "float");
    if (format != "float" && format != "base64") {
        throw bad_request("'encoding_format' must be float or base64", "encoding_format", "invalid_value");
    }
    int norm = st.opts.embd_normalize;
    if (body.contains("embd_normalize")) {
        if (!body["embd_normalize"].is_number_integer()) {
            throw bad_request("'embd_normalize' must be an integer", "embd_normalize", "invalid_type");
        }
        norm = body["embd_normalize"].get<int>();
    }
    const char * field = oai || !body.contains("content") ? "input" : "content";
    const auto inputs = embedding_inputs(body, field, st.engine->tokenizer());
    std::vector<TaskEvent> dones = run_pooled(st, req, inputs, field);
    if (dones.empty()) return;  // the client went away
    const int32_t n_embd = st.engine->info().n_embd;
    std::vector<EmbeddingResult> results;
    for (TaskEvent & e : dones) {
        EmbeddingResult r{std::move(e.embedding), e.embedding_rows, e.n_prompt};
        normalize_rows(r.rows, n_embd, norm);
        results.push_back(std::move(r));
    }
    const std::string model = body.value("model", st.model_name);
    send_json(res, oai ? openai_embeddings_json(results, n_embd, model, format == "base64")
                       : native_embeddings_json(results, n_embd));
}

}  // namespace

void handle_openai_embeddings(ServerState & st, const Request & req, Response & res) {
    answer_embeddings(st, req, res, true);
}

void handle_native_embeddings(ServerState & st, const Request & req, Response & res) {
    answer_embeddings(st, req, res, false);
}

// /rerank and its aliases: each document scored with the query.
void handle_rerank(ServerState & st, const Request & req, Response & res) {
    if (!st.opts.embeddings || st.opts.pooling != Pooling::Rank) {
        throw not_supported("This server does not support reranking. Start it with `--rerank`");
    }
    const RerankRequest r = parse_rerank_request(parse_json_body(req.body));
    std::vector<std::vector<int32_t>> prompts;
    for (const std::string & d : r.documents) prompts.push_back(rerank_prompt(st.engine->tokenizer(), r.query, d));
    const std::vector<TaskEvent> dones = run_pooled(st, req, prompts, r.tei ? "texts" : "documents");
    if (dones.empty()) return;
    std::vector<float> scores;
    std::vector<int32_t> n_tokens;
    for (const TaskEvent & e : dones) {
        scores.push_back(e.embedding.at(0));  // the first output: "yes" for Qwen3's rerankers
        n_tokens.push_back(e.n_prompt);
    }
    send_json(res, rerank_json(r, st.model_name, scores, n_tokens));
}

}  // namespace llama_tp::server
