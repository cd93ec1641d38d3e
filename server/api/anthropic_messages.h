#pragma once
// Anthropic's Messages API (POST /v1/messages): a request is read as the
// OpenAI chat request it means (system, content blocks, tool_use and
// tool_result, tools, tool_choice, stop_sequences, thinking), and answered
// in Anthropic's shape: content blocks (thinking, text, tool_use),
// stop_reason, usage, and its stream of message_start / content_block_* /
// message_delta / message_stop events.

#include "server/api/reply_shape.h"

#include <nlohmann/json.hpp>

#include <memory>

namespace llama_tp::server {

using json = nlohmann::json;

// Throws ApiError 400 naming the field for what Anthropic's API would refuse
// or this server does not support (images, server tools).
json openai_chat_body(const json & messages_request);

// n_prompt: the prompt's tokens, for message_start's usage.
std::unique_ptr<ReplyShape> anthropic_reply(const ResponseContext & ctx, std::shared_ptr<ChatOutputParser> parser,
                                            int32_t n_prompt);

}  // namespace llama_tp::server
