#pragma once
// A generation request's prompt as tokens: the chat template rendered with
// the server's and the request's options, the tool grammar and the reader of
// tool calls and reasoning it needs, the thinking budget, fill-in-the-middle
// prompts, and where user messages open (for context checkpoints).

#include "server/api/request.h"
#include "server/chat/chat_format.h"
#include "server/chat/chat_output_parser.h"
#include "server/routes/route_table.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct llama_sampler;

namespace llama_tp {
class Tokenizer;
}

namespace llama_tp::server {

// libcommon's reasoning budget for a chat turn: after `tokens` tokens inside
// the template's thinking block it forces the end tag (after a message).
struct ThinkingBudget {
    int32_t tokens = -1;  // -1: none
    std::vector<int32_t> start;
    std::vector<std::vector<int32_t>> ends;
    std::vector<int32_t> forced;
    std::vector<int32_t> prefill;  // the generation prompt, which may open the block

    // A new budget sampler for one request (nullptr: none).
    llama_sampler * sampler(const Tokenizer & tok) const;
};

struct PreparedPrompt {
    std::vector<int32_t> tokens;
    ThinkingBudget thinking_budget;
    std::vector<int32_t> grammar_prefill;   // tokens the tool grammar must see first
    std::vector<int32_t> preserved_tokens;  // sorted; shown as text in the output
    std::shared_ptr<ChatOutputParser> output_parser;
    std::vector<size_t> user_starts;  // ascending positions where a user message opens
};

// The prompt's tokens; a chat template's stop strings are added to `stops`
// (replacing -r's when the request gave none). Throws ApiError 400 for what
// the request got wrong.
PreparedPrompt prepare_prompt(const ServerState & st, GenerationRequest & gr, std::vector<std::string> & stops);

// Text entries of logit_bias become their tokens; every id must be in the vocabulary.
void resolve_logit_bias(const Tokenizer & tok, GenerationRequest & gr);

// The server's defaults (--reasoning-format, --reasoning, --chat-template-kwargs,
// --prefill-assistant, --skip-chat-parsing) with what the request says over them.
ChatTurnOptions turn_options(const ServerState & st, const GenerationRequest & gr);

}  // namespace llama_tp::server
