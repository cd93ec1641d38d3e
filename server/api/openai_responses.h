#pragma once
// OpenAI's Responses API (POST /v1/responses): `input` (a string, or message,
// function_call and function_call_output items), `instructions`, flat
// function `tools` and the rest are read as the chat request they mean; the
// answer is a response object whose `output` holds reasoning, message and
// function_call items, or the API's stream of response.* events. Stateless:
// previous_response_id is refused.

#include "server/api/reply_shape.h"

#include <nlohmann/json.hpp>

#include <memory>

namespace llama_tp::server {

using json = nlohmann::json;

// Throws ApiError 400 naming the field.
json chat_body_from_responses(const json & responses_request);

std::unique_ptr<ReplyShape> responses_reply(const ResponseContext & ctx, std::shared_ptr<ChatOutputParser> parser,
                                            int32_t n_prompt);

}  // namespace llama_tp::server
