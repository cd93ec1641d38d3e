#pragma once
// A generation request of any API becomes scheduler tasks and an answer: its
// prompt (server/serving/prompt.h), one task per choice, and the reply,
// whole or streamed, in the API's shape; and prompts pooled (embeddings,
// rerank) in whichever slots are free.

#include "server/api/request.h"
#include "server/chat/chat_format.h"
#include "server/routes/route_table.h"
#include "server/serving/task.h"

#include <cstdint>
#include <string>
#include <vector>

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace llama_tp::server {

// The API shape a route answers in.
enum class Shape { OpenAi, Native, Anthropic, Responses };

// Parses the body (another API's as the chat request it means), submits a
// task per choice and answers, blocking or streamed.
void handle_generation(ServerState & st, Endpoint endpoint, const httplib::Request & req, httplib::Response & res,
                       Shape shape = Shape::OpenAi);

// The tokens a chat request's prompt takes, as a completion would count them.
size_t prompt_tokens(ServerState & st, const json & chat_body);

// Every prompt a task of its own, decoded in whichever slots are free and
// pooled; their Done events in the prompts' order, or none when the client
// went away. `field` names the body's field for a prompt that does not fit.
std::vector<TaskEvent> run_pooled(ServerState & st, const httplib::Request & req,
                                  const std::vector<std::vector<int32_t>> & prompts, const char * field);

}  // namespace llama_tp::server
