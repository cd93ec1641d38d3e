#pragma once
// The named handlers of the route table (route_table.cpp), by the protocol
// they serve: OpenAI's (openai.cpp), Anthropic's (anthropic.cpp),
// llama-server's own (native.cpp), pooled outputs (pooling.cpp) and the
// server's administration (admin.cpp). Each answers one request; an
// exception it throws becomes an error object (guarded()).

#include "server/routes/route_table.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace llama_tp::server {

using RouteHandler = void (*)(ServerState & st, const httplib::Request & req, httplib::Response & res);

// OpenAI
void handle_models(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_completions(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_chat(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_chat_input_tokens(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_responses(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_responses_input_tokens(ServerState & st, const httplib::Request & req, httplib::Response & res);

// Anthropic
void handle_messages(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_count_tokens(ServerState & st, const httplib::Request & req, httplib::Response & res);

// llama-server's own
void handle_native_completion(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_infill(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_tokenize(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_detokenize(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_apply_template(ServerState & st, const httplib::Request & req, httplib::Response & res);

// Pooled outputs: embeddings in both shapes, rerank
void handle_openai_embeddings(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_native_embeddings(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_rerank(ServerState & st, const httplib::Request & req, httplib::Response & res);

// Administration
void handle_health(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_metrics(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_props(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_set_props(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_slots(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_slot_action(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_lora_adapters(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_set_lora_adapters(ServerState & st, const httplib::Request & req, httplib::Response & res);
void handle_completion_control(ServerState & st, const httplib::Request & req, httplib::Response & res);

}  // namespace llama_tp::server
