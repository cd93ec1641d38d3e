#pragma once
// Parsing and validation of completion and chat-completion bodies into a typed
// request. Everything a client can get wrong is found here and reported as
// ApiError 400 naming the field; nothing here touches the engine.

#include "runtime/text/sampler.h"
#include "server/http/json_fields.h"
#include "server/chat/tools.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llama_tp::server {

using json = nlohmann::json;

// Completion and Chat: OpenAI's shapes (/v1/completions, /v1/chat/completions);
// Native: llama-server's own (/completion, /completions); Infill: its /infill
// (native fields, and a prompt made of a prefix and a suffix).
enum class Endpoint { Completion, Chat, Native, Infill };

struct ChatMessage {
    std::string role;               // system, user, assistant, tool (developer is mapped to system)
    std::string content;            // text parts joined
    std::string reasoning_content;  // an assistant turn's thinking, given back in history
    std::string name;
    std::string tool_call_id;
    std::vector<ToolCall> tool_calls;  // assistant turns that called tools
};

// What a request gets for the fields it leaves out: the server's flags.
struct RequestDefaults {
    SamplingParams sampling;
    bool ignore_eos = false;           // --ignore-eos
    bool cache_prompt = true;          // --no-cache-prompt: reuse nothing cached
    int32_t n_cache_reuse = 0;         // --cache-reuse
    std::vector<std::string> stop;     // -r / --reverse-prompt
    int32_t sse_ping_interval_s = 30;  // --sse-ping-interval: a comment line after this long silent (<= 0: never)
};

// One prompt of a completion: text or token ids.
struct PromptInput {
    bool is_tokens = false;
    std::string text;
    std::vector<int32_t> tokens;
};

// What the request wants generated; the prompt is not yet tokenized.
struct GenerationRequest {
    Endpoint endpoint = Endpoint::Completion;
    std::string model;  // as sent; "" when absent

    // Completion: either text or token ids.
    bool prompt_is_tokens = false;
    std::string prompt_text;
    std::vector<int32_t> prompt_tokens;
    // Several prompts in one request (llama-server's and OpenAI's prompt
    // arrays): those after the first, each answered on its own, prompt k's
    // choice i at index k * n_choices + i.
    std::vector<PromptInput> more_prompts;
    void take_prompt(PromptInput p) {
        prompt_is_tokens = p.is_tokens;
        prompt_text = std::move(p.text);
        prompt_tokens = std::move(p.tokens);
    }

    // Infill: the code before and after the gap, other files for context.
    std::string input_prefix, input_suffix;
    std::vector<std::pair<std::string, std::string>> input_extra;  // filename, text

    // Chat.
    std::vector<ChatMessage> messages;
    ToolSet tools;
    std::string reasoning_format;  // "" -> the server's (--reasoning-format)
    std::string reasoning_effort;  // "" -> the template's; "none" turns thinking off
    json chat_template_kwargs = json::object();
    int continue_final_message = -1;  // -1: when the last message is the assistant's (prefill)
    // Tokens of thinking before the end tag is forced (libcommon's reasoning
    // budget); -1: the server's (--reasoning-budget). The message, when set,
    // goes before the forced end tag (--reasoning-budget-message).
    int32_t reasoning_budget = -1;
    std::optional<std::string> reasoning_budget_message;
    // The thinking can be ended while it runs (POST /v1/chat/completions/control).
    bool reasoning_control = false;
    bool add_generation_prompt = true;

    int32_t max_tokens = -1;  // -1: server default / until the context is full
    int32_t n_keep = -2;      // context shift: prompt tokens kept (-1: all; -2: the server's --keep)
    int32_t n_discard = 0;    // context shift: tokens dropped (0: half of those after n_keep)
    std::vector<std::string> stop;
    bool stop_is_default = false;  // stop holds -r's strings (the request gave none)
    bool ignore_eos = false;
    bool cache_prompt = true;          // false: decode the whole prompt, reuse nothing cached
    int32_t n_cache_reuse = 0;         // cached chunks of at least this many tokens are moved (0: none)
    int32_t sse_ping_interval_s = 30;  // streaming: a ping comment after this long without an event
    SamplingParams sampling;
    std::string json_schema;  // response_format: turned into a grammar by the route

    bool stream = false;
    bool include_usage = false;
    int32_t id_slot = -1;                      // llama-server: run in this slot (-1: any idle one)
    std::optional<json> lora;                  // llama-server's [{"id", "scale"}], read against the server's adapters
    int32_t t_max_predict_ms = 0;              // stop generating after this long, once a line is complete (0: no limit)
    bool timings_per_token = false;            // every stream event carries the timings so far
    bool return_progress = false;              // stream events while the prompt is processed
    std::vector<std::string> response_fields;  // native: only these ("a/b" paths) in the answer
    int32_t n_choices = 1;                     // n (OpenAI) / n_cmpl (llama-server): answers to the same prompt

    bool logprobs = false;  // completion: logprobs=N>0 ; chat: logprobs=true; native: n_probs=N>0
    int32_t top_logprobs = 0;
    bool post_sampling_probs = false;  // llama-server's: probabilities after the sampler chain instead
    bool return_tokens = false;        // native: the generated token ids too
    // logit_bias entries that name text: every token of the text gets the bias
    // (ids are in sampling.logit_bias; the route tokenizes these).
    std::vector<std::pair<std::string, float>> logit_bias_text;
};

// `body` must already be valid JSON.
GenerationRequest parse_generation_request(Endpoint endpoint, const json & body, const RequestDefaults & defaults);

// llama-server's sampler names (penalties, dry, top_n_sigma, top_k, typ_p,
// top_p, min_p, xtc, temperature and their aliases) or its one-letter codes,
// in order. Throws ApiError 400 naming `param` for an unknown one.
std::vector<SamplerStage> sampler_order(const json & names_or_codes, const std::string & param);

}  // namespace llama_tp::server
