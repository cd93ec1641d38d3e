#include "server/api/anthropic_messages.h"

namespace llama_tp::server {

namespace {

// Text of a string or of an array of text blocks.
std::string text_of(const json & content, const std::string & param) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array())
        throw bad_request("'" + param + "' must be a string or an array of blocks", param, "invalid_value");
    std::string out;
    for (size_t i = 0; i < content.size(); ++i) {
        const json & b = content[i];
        if (!b.is_object() || string_in(b, "type", param + "[" + std::to_string(i) + "]") != "text" ||
            !b.contains("text") || !b["text"].is_string()) {
            throw bad_request("'" + param + "[" + std::to_string(i) + "]' must be a text block", param,
                              "invalid_value");
        }
        out += (out.empty() ? "" : "\n") + b["text"].get<std::string>();
    }
    return out;
}

// One Anthropic message -> one or more OpenAI messages (tool results become
// tool messages, which come before the user's own text).
void add_message(const json & m, size_t i, json & out) {
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_request("'" + param + "' must be an object", param, "invalid_value");
    const std::string role = string_in(m, "role", param);
    if (role != "user" && role != "assistant")
        throw bad_request("'" + param + ".role' must be user or assistant", param, "invalid_value");
    const json content = m.contains("content") ? m["content"] : json("");
    if (content.is_string()) {
        out.push_back({{"role", role}, {"content", content}});
        return;
    }
    if (!content.is_array())
        throw bad_request("'" + param + ".content' must be a string or an array of blocks", param, "invalid_value");
    std::string text, thinking;
    json calls = json::array();
    for (size_t k = 0; k < content.size(); ++k) {
        const json & b = content[k];
        const std::string bparam = param + ".content[" + std::to_string(k) + "]";
        const std::string type = string_in(b, "type", bparam);
        if (type == "text") {
            text += (text.empty() ? "" : "\n") + text_of(json::array({b}), bparam);
        } else if (type == "thinking" && role == "assistant") {
            thinking += string_in(b, "thinking", bparam);
        } else if (type == "redacted_thinking") {
            continue;
        } else if (type == "tool_use" && role == "assistant") {
            if (!b.contains("id") || !b.contains("name"))
                throw bad_request("'" + bparam + "' needs an id and a name", bparam, "invalid_value");
            calls.push_back(
                {{"id", b["id"]},
                 {"type", "function"},
                 {"function", {{"name", b["name"]}, {"arguments", b.value("input", json::object()).dump()}}}});
        } else if (type == "tool_result" && role == "user") {
            std::string result = b.contains("content") ? text_of(b["content"], bparam + ".content") : "";
            if (bool_in(b, "is_error", bparam, false)) result = "Error: " + result;
            out.push_back(
                {{"role", "tool"}, {"tool_call_id", string_in(b, "tool_use_id", bparam)}, {"content", result}});
        } else if (type == "image" || type == "document") {
            throw bad_request("'" + bparam + "': " + type + " blocks are not supported (text only)", bparam,
                              "unsupported_value");
        } else {
            throw bad_request(
                "'" + bparam + "': a block of type '" + type + "' is not allowed in a " + role + " message", bparam,
                "invalid_value");
        }
    }
    if (role == "assistant") {
        json msg = {{"role", "assistant"}, {"content", text}};
        if (!thinking.empty()) msg["reasoning_content"] = thinking;
        if (!calls.empty()) msg["tool_calls"] = calls;
        out.push_back(msg);
    } else if (!text.empty() || out.empty() || out.back().value("role", "") != "tool") {
        out.push_back({{"role", "user"}, {"content", text}});
    }
}

json tools_of(const json & tools) {
    if (!tools.is_array()) throw bad_request("'tools' must be an array", "tools", "invalid_value");
    json out = json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
        const json & t = tools[i];
        const std::string param = "tools[" + std::to_string(i) + "]";
        if (!t.is_object() || !t.contains("name"))
            throw bad_request("'" + param + "' needs a name", param, "invalid_value");
        const std::string type = string_in(t, "type", param, "custom");
        if (type != "custom") {
            throw bad_request("'" + param + "': server tools (" + type + ") are not supported", param,
                              "unsupported_value");
        }
        json fn = {{"name", t["name"]}, {"parameters", t.value("input_schema", json::object())}};
        if (t.contains("description")) fn["description"] = t["description"];
        out.push_back({{"type", "function"}, {"function", fn}});
    }
    return out;
}

json tool_choice_of(const json & c, json & body) {
    if (!c.is_object()) throw bad_request("'tool_choice' must be an object", "tool_choice", "invalid_value");
    if (bool_in(c, "disable_parallel_tool_use", "tool_choice", false)) body["parallel_tool_calls"] = false;
    const std::string type = string_in(c, "type", "tool_choice", "auto");
    if (type == "auto") return "auto";
    if (type == "any") return "required";
    if (type == "none") return "none";
    if (type == "tool") return {{"type", "function"}, {"function", {{"name", string_in(c, "name", "tool_choice")}}}};
    throw bad_request("'tool_choice.type' must be auto, any, tool or none", "tool_choice", "invalid_value");
}

}  // namespace

json openai_chat_body(const json & in) {
    json body = json::object();
    json messages = json::array();
    if (in.contains("system") && !in["system"].is_null()) {
        messages.push_back({{"role", "system"}, {"content", text_of(in["system"], "system")}});
    }
    if (!in.contains("messages") || !in["messages"].is_array() || in["messages"].empty()) {
        throw bad_request("'messages' must be a non-empty array", "messages", "missing_required_parameter");
    }
    for (size_t i = 0; i < in["messages"].size(); ++i) add_message(in["messages"][i], i, messages);
    body["messages"] = messages;
    // The fields that mean the same under OpenAI's names; the request parser
    // checks their types and ranges.
    for (const char * same : {"model", "temperature", "top_p", "top_k", "stream"}) {
        if (in.contains(same)) body[same] = in[same];
    }
    if (in.contains("max_tokens")) body["max_tokens"] = in["max_tokens"];
    if (in.contains("stop_sequences")) body["stop"] = in["stop_sequences"];
    if (in.contains("tools")) body["tools"] = tools_of(in["tools"]);
    if (in.contains("tool_choice")) body["tool_choice"] = tool_choice_of(in["tool_choice"], body);
    if (in.contains("thinking") && in["thinking"].is_object()) {
        const bool on = string_in(in["thinking"], "type", "thinking") == "enabled";
        body["chat_template_kwargs"] = {{"enable_thinking", on}};
    }
    // llama-server's own fields (grammar, n_probs, cache_prompt, ...) pass as they are.
    static const char * const anthropic[] = {"system",         "messages",     "model",       "max_tokens",
                                             "stop_sequences", "tools",        "tool_choice", "thinking",
                                             "metadata",       "temperature",  "top_p",       "top_k",
                                             "stream",         "service_tier", "container",   "mcp_servers"};
    for (const auto & [key, value] : in.items()) {
        bool known = false;
        for (const char * a : anthropic) known |= key == a;
        if (!known && !body.contains(key)) body[key] = value;
    }
    return body;
}

namespace {

std::string sse(const char * name, const json & data) {
    return std::string("event: ") + name + "\ndata: " + dump_json(data) + "\n\n";
}

std::string stop_reason(const TaskEvent & done, bool called_tools) {
    if (called_tools) return "tool_use";
    if (done.stop_type == "word") return "stop_sequence";
    if (done.stop_type == "limit") return "max_tokens";
    return "end_turn";
}

json usage(const TaskEvent & done) {
    return {{"input_tokens", done.n_prompt},
            {"output_tokens", done.n_completion},
            {"cache_read_input_tokens", done.n_cached}};
}

json tool_input(const std::string & arguments) {
    try {
        return json::parse(arguments);
    } catch (const std::exception &) {
        return json::object();  // a call cut off by max_tokens
    }
}

class AnthropicReply final : public ReplyShape {
  public:
    AnthropicReply(const ResponseContext & ctx, std::shared_ptr<ChatOutputParser> parser, int32_t n_prompt)
        : ctx_(ctx), parser_(std::move(parser)), n_prompt_(n_prompt), id_(random_id("msg_")) {}

    json whole(const GeneratedText & out, const TaskEvent & done) override {
        const AssistantMessage m = parser_ ? parser_->parse(out.text) : AssistantMessage{out.text, "", {}};
        json content = json::array();
        if (!m.reasoning_content.empty()) {
            content.push_back({{"type", "thinking"}, {"thinking", m.reasoning_content}, {"signature", ""}});
        }
        if (!m.content.empty() || (m.tool_calls.empty() && m.reasoning_content.empty())) {
            content.push_back({{"type", "text"}, {"text", m.content}});
        }
        for (const ToolCall & c : m.tool_calls) {
            content.push_back(
                {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", tool_input(c.arguments)}});
        }
        return {{"id", id_},
                {"type", "message"},
                {"role", "assistant"},
                {"model", ctx_.model},
                {"content", content},
                {"stop_reason", stop_reason(done, !m.tool_calls.empty())},
                {"stop_sequence", done.stop_type == "word" ? json(done.stopping_word) : json(nullptr)},
                {"usage", usage(done)}};
    }

    std::string stream_start() override {
        const json message = {{"id", id_},
                              {"type", "message"},
                              {"role", "assistant"},
                              {"model", ctx_.model},
                              {"content", json::array()},
                              {"stop_reason", nullptr},
                              {"stop_sequence", nullptr},
                              {"usage", {{"input_tokens", n_prompt_}, {"output_tokens", 0}}}};
        return sse("message_start", {{"type", "message_start"}, {"message", message}});
    }

    std::string stream_text(const TaskEvent & e) override {
        if (!parser_) return text_delta("text", e.text);
        text_ += e.text;
        return parsed(false);
    }

    std::string stream_done(const TaskEvent & done) override {
        std::string out = parser_ ? parsed(true) : "";
        out += close_block();
        const json delta = {{"stop_reason", stop_reason(done, called_tools_)},
                            {"stop_sequence", done.stop_type == "word" ? json(done.stopping_word) : json(nullptr)}};
        return out +
               sse("message_delta",
                   {{"type", "message_delta"}, {"delta", delta}, {"usage", {{"output_tokens", done.n_completion}}}});
    }

    std::string stream_end(const TaskEvent &) override { return sse("message_stop", {{"type", "message_stop"}}); }

    std::string stream_error(const ApiError & e) override {
        return sse("error", {{"type", "error"}, {"error", {{"type", e.type}, {"message", e.what()}}}});
    }

  private:
    // A delta for a block of `kind` (text or thinking), opening it if another is open.
    std::string text_delta(const std::string & kind, const std::string & piece) {
        if (piece.empty()) return "";
        std::string out;
        if (open_ != kind) {
            out += close_block();
            json block =
                kind == "text" ? json{{"type", "text"}, {"text", ""}} : json{{"type", "thinking"}, {"thinking", ""}};
            out += open_block(kind, block);
        }
        const json delta = kind == "text" ? json{{"type", "text_delta"}, {"text", piece}}
                                          : json{{"type", "thinking_delta"}, {"thinking", piece}};
        return out + sse("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", delta}});
    }

    std::string tool_delta(const json & call) {
        std::string out;
        const size_t n = call.value("index", (size_t) 0);
        const json & fn = call.contains("function") ? call["function"] : json::object();
        if (open_ != "tool_use" || n != tool_index_) {
            out += close_block();
            tool_index_ = n;
            out += open_block("tool_use", {{"type", "tool_use"},
                                           {"id", call.value("id", "")},
                                           {"name", fn.value("name", "")},
                                           {"input", json::object()}});
        }
        const std::string args = fn.value("arguments", "");
        if (args.empty()) return out;
        const json delta = {{"type", "input_json_delta"}, {"partial_json", args}};
        return out + sse("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", delta}});
    }

    std::string parsed(bool final) {
        std::string out;
        for (const json & d : parser_->stream_deltas(text_, final)) {
            if (d.contains("reasoning_content")) out += text_delta("thinking", d["reasoning_content"]);
            if (d.contains("content")) out += text_delta("text", d["content"]);
            if (d.contains("tool_calls")) {
                called_tools_ = true;
                for (const json & c : d["tool_calls"]) out += tool_delta(c);
            }
        }
        return out;
    }

    std::string open_block(const std::string & kind, const json & block) {
        index_++;
        open_ = kind;
        return sse("content_block_start",
                   {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
    }

    std::string close_block() {
        if (open_.empty()) return "";
        open_.clear();
        return sse("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
    }

    ResponseContext ctx_;
    std::shared_ptr<ChatOutputParser> parser_;
    int32_t n_prompt_;
    std::string id_;
    std::string text_;  // everything so far, for the parser
    std::string open_;  // the open block's kind ("" none)
    int index_ = -1;    // the open (or last) block's index
    size_t tool_index_ = 0;
    bool called_tools_ = false;
};

}  // namespace

std::unique_ptr<ReplyShape> anthropic_reply(const ResponseContext & ctx, std::shared_ptr<ChatOutputParser> parser,
                                            int32_t n_prompt) {
    return std::make_unique<AnthropicReply>(ctx, std::move(parser), n_prompt);
}

}  // namespace llama_tp::server
