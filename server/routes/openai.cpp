#include "server/routes/handlers.h"

#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "server/http/http_access.h"
#include "server/api/anthropic_messages.h"
#include "server/api/openai_responses.h"
#include "server/serving/generation.h"

#include <cpp-httplib/httplib.h>

#include "llama.h"

namespace llama_tp::server {

using httplib::Request;
using httplib::Response;

namespace {

json model_entry(const ServerState & st) {
    const ModelInfo & info = st.engine->info();
    return {{"id", st.model_name},
            {"object", "model"},
            {"created", st.created},
            {"owned_by", "llama-tp"},
            {"aliases", st.opts.aliases},
            {"tags", st.opts.tags},
            {"meta",
             {{"vocab_type", (int) llama_vocab_type(st.engine->tokenizer().vocab())},
              {"n_vocab", info.n_vocab},
              {"n_ctx", st.n_ctx_slot},
              {"n_ctx_train", info.n_ctx_train},
              {"n_embd", info.n_embd},
              {"n_params", info.n_params},
              {"size", info.weight_bytes},
              {"ftype", info.file_type},
              {"architecture", info.architecture}}}};
}

// llama-server's second listing, in Ollama's shape (its clients read this one).
json ollama_entry(const ServerState & st) {
    return {{"name", st.model_name},
            {"model", st.model_name},
            {"modified_at", ""},
            {"size", ""},
            {"digest", ""},
            {"type", "model"},
            {"description", ""},
            {"tags", json::array({""})},
            {"capabilities", json::array({"completion"})},
            {"parameters", ""},
            {"details",
             {{"parent_model", ""},
              {"format", "gguf"},
              {"family", ""},
              {"families", json::array({""})},
              {"parameter_size", ""},
              {"quantization_level", ""}}}};
}

}  // namespace

void handle_models(ServerState & st, const Request &, Response & res) {
    send_json(
        res,
        {{"models", json::array({ollama_entry(st)})}, {"object", "list"}, {"data", json::array({model_entry(st)})}});
}

void handle_completions(ServerState & st, const Request & req, Response & res) {
    handle_generation(st, Endpoint::Completion, req, res);
}

void handle_chat(ServerState & st, const Request & req, Response & res) {
    handle_generation(st, Endpoint::Chat, req, res);
}

void handle_chat_input_tokens(ServerState & st, const Request & req, Response & res) {
    send_json(res,
              {{"object", "response.input_tokens"}, {"input_tokens", prompt_tokens(st, parse_json_body(req.body))}});
}

void handle_responses(ServerState & st, const Request & req, Response & res) {
    handle_generation(st, Endpoint::Chat, req, res, Shape::Responses);
}

void handle_responses_input_tokens(ServerState & st, const Request & req, Response & res) {
    send_json(res, {{"object", "response.input_tokens"},
                    {"input_tokens", prompt_tokens(st, chat_body_from_responses(parse_json_body(req.body)))}});
}

}  // namespace llama_tp::server
