#pragma once
// OpenAI-shaped JSON: full responses, stream chunks, usage and errors.

#include "server/http/api_error.h"
#include "server/chat/chat_output_parser.h"
#include "server/api/request.h"
#include "server/serving/task.h"
#include "server/chat/tools.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace llama_tp {
class Tokenizer;
}

namespace llama_tp::server {

using json = nlohmann::json;

// What every response and chunk of one request shares.
struct ResponseContext {
    Endpoint endpoint = Endpoint::Completion;
    std::string id;       // "cmpl-..." or "chatcmpl-..."
    int64_t created = 0;  // unix seconds
    std::string model;
    bool logprobs = false;
    bool post_sampling_probs = false;       // they are probabilities ("prob", "top_probs")
    const Tokenizer * tokenizer = nullptr;  // for logprob token text
    int32_t index = 0;                      // the choice (of n) this answer is
    // Native shape only: the prompt as text, the request's settings, and
    // whether the final answer lists the generated tokens (stream events
    // always carry theirs, as llama-server's).
    bool return_tokens = false;
    std::string prompt;
    json settings;
    std::vector<std::string> response_fields;  // "" -> all

    static ResponseContext make(Endpoint endpoint, const std::string & model, bool logprobs, const Tokenizer * tok);
};

// prefix and 24 random letters and digits: response, message and call ids.
std::string random_id(const char * prefix);

// Serialises, replacing invalid UTF-8 instead of throwing.
std::string dump_json(const json & j);

json error_json(const ApiError & e);

json usage_json(const TaskEvent & done);
json timings_json(const TaskEvent & done);

// A complete (non-streamed) response. Chat: the message's reasoning and the
// tool calls the model made, if any, go into the message, and a stop then
// reads "tool_calls".
json final_response(const ResponseContext & ctx, const AssistantMessage & message,
                    const std::vector<TokenLogprob> & logprobs, const TaskEvent & done);

// The finish reason to report: a natural stop after tool calls is "tool_calls".
std::string finish_reason_after(const std::string & reason, bool called_tools);

// Stream chunks. `finish_reason` "" -> null.
json text_chunk(const ResponseContext & ctx, const std::string & text, const std::vector<TokenLogprob> & logprobs);
json delta_chunk(const ResponseContext & ctx, const json & delta);  // chat: any delta object
json role_chunk(const ResponseContext & ctx);                       // chat only: the first chunk, {"role":"assistant"}
json finish_chunk(const ResponseContext & ctx, const TaskEvent & done);
json usage_chunk(const ResponseContext & ctx, const TaskEvent & done);

}  // namespace llama_tp::server
