#include "server/routes/handlers.h"

#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "server/http/http_access.h"
#include "server/api/anthropic_messages.h"
#include "server/serving/generation.h"

#include <cpp-httplib/httplib.h>

namespace llama_tp::server {

using httplib::Request;
using httplib::Response;

void handle_messages(ServerState & st, const Request & req, Response & res) {
    handle_generation(st, Endpoint::Chat, req, res, Shape::Anthropic);
}

void handle_count_tokens(ServerState & st, const Request & req, Response & res) {
    send_json(res, {{"input_tokens", prompt_tokens(st, openai_chat_body(parse_json_body(req.body)))}});
}

}  // namespace llama_tp::server
