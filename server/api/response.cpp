#include "server/api/response.h"

#include "server/build_info.h"

#include "runtime/text/tokenizer.h"

#include <chrono>
#include <random>

namespace llama_tp::server {

namespace {

json bytes_of(const std::string & s) {
    json b = json::array();
    for (unsigned char c : s) {
        b.push_back((int) c);
    }
    return b;
}

std::string piece_of(const ResponseContext & ctx, int32_t token) {
    return ctx.tokenizer != nullptr ? ctx.tokenizer->piece(token, false) : std::string();
}

json logprobs_json(const ResponseContext & ctx, const std::vector<TokenLogprob> & lps, size_t text_offset) {
    if (!ctx.logprobs) {
        return nullptr;
    }
    if (ctx.endpoint == Endpoint::Chat) {
        const char * value = ctx.post_sampling_probs ? "prob" : "logprob";
        json content = json::array();
        for (const auto & lp : lps) {
            json top = json::array();
            for (const auto & t : lp.top) {
                const std::string p = piece_of(ctx, t.token);
                top.push_back({{"id", t.token}, {"token", p}, {value, t.logprob}, {"bytes", bytes_of(p)}});
            }
            content.push_back({{"id", lp.token},
                               {"token", lp.piece},
                               {value, lp.logprob},
                               {"bytes", bytes_of(lp.piece)},
                               {ctx.post_sampling_probs ? "top_probs" : "top_logprobs", top}});
        }
        return {{"content", content}, {"refusal", nullptr}};
    }
    json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), offsets = json::array();
    size_t offset = text_offset;
    for (const auto & lp : lps) {
        tokens.push_back(lp.piece);
        token_logprobs.push_back(lp.logprob);
        json top = json::object();
        for (const auto & t : lp.top) {
            top[piece_of(ctx, t.token)] = t.logprob;
        }
        top_logprobs.push_back(top);
        offsets.push_back(offset);
        offset += lp.piece.size();
    }
    return {{"tokens", tokens},
            {"token_logprobs", token_logprobs},
            {"top_logprobs", top_logprobs},
            {"text_offset", offsets}};
}

json base(const ResponseContext & ctx, bool chunk) {
    const char * object =
        ctx.endpoint == Endpoint::Chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return {{"id", ctx.id},
            {"object", object},
            {"created", ctx.created},
            {"model", ctx.model},
            {"system_fingerprint", build_fingerprint()}};
}

json tool_calls_json(const std::vector<ToolCall> & calls) {
    json out = json::array();
    for (const auto & c : calls) {
        out.push_back(
            {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    return out;
}

json finish_value(const std::string & reason) {
    return reason.empty() ? json(nullptr) : json(reason);
}

}  // namespace

std::string random_id(const char * prefix) {
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uniform_int_distribution<int> pick(0, (int) sizeof(alphabet) - 2);
    std::string id = prefix;
    for (int i = 0; i < 24; i++) {
        id += alphabet[pick(rng)];
    }
    return id;
}

ResponseContext ResponseContext::make(Endpoint endpoint, const std::string & model, bool logprobs,
                                      const Tokenizer * tok) {
    ResponseContext ctx;
    ctx.endpoint = endpoint;
    ctx.id = random_id(endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-");
    ctx.created =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    ctx.model = model;
    ctx.logprobs = logprobs;
    ctx.tokenizer = tok;
    return ctx;
}

std::string dump_json(const json & j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json error_json(const ApiError & e) {
    json error = {{"message", e.what()},
                  {"type", e.type},
                  {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                  {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
    if (e.n_ctx > 0) {
        error["n_prompt_tokens"] = e.n_prompt_tokens;
        error["n_ctx"] = e.n_ctx;
    }
    return {{"error", error}};
}

json usage_json(const TaskEvent & done) {
    return {{"prompt_tokens", done.n_prompt},
            {"completion_tokens", done.n_completion},
            {"total_tokens", done.n_prompt + done.n_completion},
            {"prompt_tokens_details", {{"cached_tokens", done.n_cached}}}};
}

json timings_json(const TaskEvent & done) {
    const auto & t = done.timings;
    auto per_token = [](double ms, int32_t n) { return n > 0 ? ms / n : 0.0; };
    auto per_second = [](double ms, int32_t n) { return ms > 0 ? 1e3 * n / ms : 0.0; };
    json j = {{"cache_n", done.n_cached},
              {"prompt_n", t.prompt_n},
              {"prompt_ms", t.prompt_ms},
              {"prompt_per_token_ms", per_token(t.prompt_ms, t.prompt_n)},
              {"prompt_per_second", per_second(t.prompt_ms, t.prompt_n)},
              {"predicted_n", t.predicted_n},
              {"predicted_ms", t.predicted_ms},
              {"predicted_per_token_ms", per_token(t.predicted_ms, t.predicted_n)},
              {"predicted_per_second", per_second(t.predicted_ms, t.predicted_n)}};
    // As llama-server: present once speculative decoding proposed something.
    if (t.draft_n > 0) {
        j["draft_n"] = t.draft_n;
        j["draft_n_accepted"] = t.draft_n_accepted;
    }
    return j;
}

std::string finish_reason_after(const std::string & reason, bool called_tools) {
    return called_tools && reason == "stop" ? "tool_calls" : reason;
}

json final_response(const ResponseContext & ctx, const AssistantMessage & m, const std::vector<TokenLogprob> & logprobs,
                    const TaskEvent & done) {
    json r = base(ctx, false);
    json choice;
    const std::string & text = m.content;
    const std::vector<ToolCall> & tool_calls = m.tool_calls;
    if (ctx.endpoint == Endpoint::Chat) {
        json message = {{"role", "assistant"}, {"content", text}};
        if (!m.reasoning_content.empty()) message["reasoning_content"] = m.reasoning_content;
        if (!tool_calls.empty()) {
            if (text.empty()) {
                message["content"] = nullptr;
            }
            message["tool_calls"] = tool_calls_json(tool_calls);
        }
        choice = {{"index", ctx.index},
                  {"message", message},
                  {"logprobs", logprobs_json(ctx, logprobs, 0)},
                  {"finish_reason", finish_value(finish_reason_after(done.finish_reason, !tool_calls.empty()))}};
    } else {
        choice = {{"index", ctx.index},
                  {"text", text},
                  {"logprobs", logprobs_json(ctx, logprobs, 0)},
                  {"finish_reason", finish_value(done.finish_reason)}};
    }
    r["choices"] = json::array({choice});
    r["usage"] = usage_json(done);
    r["timings"] = timings_json(done);
    return r;
}

json text_chunk(const ResponseContext & ctx, const std::string & text, const std::vector<TokenLogprob> & logprobs) {
    json r = base(ctx, true);
    json choice;
    if (ctx.endpoint == Endpoint::Chat) {
        choice = {{"index", ctx.index}, {"delta", {{"content", text}}}};
    } else {
        choice = {{"index", ctx.index}, {"text", text}};
    }
    choice["logprobs"] = logprobs_json(ctx, logprobs, 0);
    choice["finish_reason"] = nullptr;
    r["choices"] = json::array({choice});
    return r;
}

json delta_chunk(const ResponseContext & ctx, const json & delta) {
    json r = base(ctx, true);
    r["choices"] =
        json::array({{{"index", ctx.index}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
    return r;
}

json role_chunk(const ResponseContext & ctx) {
    json r = base(ctx, true);
    r["choices"] = json::array({{{"index", ctx.index},
                                 {"delta", {{"role", "assistant"}, {"content", nullptr}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}});
    return r;
}

json finish_chunk(const ResponseContext & ctx, const TaskEvent & done) {
    json r = base(ctx, true);
    json choice;
    if (ctx.endpoint == Endpoint::Chat) {
        choice = {{"index", ctx.index}, {"delta", json::object()}};
    } else {
        choice = {{"index", ctx.index}, {"text", ""}};
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_value(done.finish_reason);
    r["choices"] = json::array({choice});
    // llama-server ends a completion's stream with its usage, asked for or not.
    if (ctx.endpoint != Endpoint::Chat) r["usage"] = usage_json(done);
    r["timings"] = timings_json(done);
    return r;
}

json usage_chunk(const ResponseContext & ctx, const TaskEvent & done) {
    json r = base(ctx, true);
    r["choices"] = json::array();
    r["usage"] = usage_json(done);
    return r;
}

}  // namespace llama_tp::server
