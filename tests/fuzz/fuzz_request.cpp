// A client's request body as every generation endpoint reads it: any bytes
// are either a request (OpenAI chat and completions, llama-server's
// /completion and /infill, Anthropic's /v1/messages and OpenAI's
// /v1/responses through their chat form, rerank) or an ApiError the server
// answers with a 4xx. Any other exception would be a 500, and a crash takes
// every client down.
#include "server/api/anthropic_messages.h"
#include "server/api/openai_responses.h"
#include "server/api/request.h"
#include "server/api/pooling/rerank.h"
#include "server/http/api_error.h"
#include "server/http/json_fields.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "json-schema-to-grammar.h"
#include "json.h"

namespace {

using namespace llama_tp::server;

// Only an ApiError below 500 may leave the request's reading.
template <typename F>
void as_the_server_would(const char * what, F && read) {
    try {
        read();
    } catch (const ApiError & e) {
        if (e.status >= 500) {
            std::fprintf(stderr, "%s: status %d: %s\n", what, e.status, e.what());
            std::abort();
        }
    } catch (const std::exception & e) {
        std::fprintf(stderr, "%s: not an ApiError: %s\n", what, e.what());
        std::abort();
    }
}

void generation(Endpoint endpoint, const json & body) {
    const GenerationRequest gr = parse_generation_request(endpoint, body, RequestDefaults{});
    if (gr.json_schema.empty()) return;
    try {  // as the route converts it: a schema it cannot take is a 400
        (void) json_schema_to_grammar(common_json::parse(gr.json_schema));
    } catch (const std::exception &) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    json body;
    try {
        body = parse_json(std::string(reinterpret_cast<const char *>(data), size));
    } catch (const ApiError &) {
        return 0;
    }
    as_the_server_would("chat", [&] { generation(Endpoint::Chat, body); });
    as_the_server_would("completions", [&] { generation(Endpoint::Completion, body); });
    as_the_server_would("completion", [&] { generation(Endpoint::Native, body); });
    as_the_server_would("infill", [&] { generation(Endpoint::Infill, body); });
    as_the_server_would("messages", [&] { generation(Endpoint::Chat, openai_chat_body(body)); });
    as_the_server_would("responses", [&] { generation(Endpoint::Chat, chat_body_from_responses(body)); });
    as_the_server_would("rerank", [&] { (void) parse_rerank_request(body); });
    return 0;
}
