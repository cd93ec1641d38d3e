#include "server/api/openai_responses.h"

#include <chrono>

namespace llama_tp::server {

namespace {

// The call a function_call_output answers: required, as OpenAI requires it.
std::string call_id_of(const json & item, const std::string & param) {
    const std::string id = string_in(item, "call_id", param);
    if (id.empty()) {
        throw bad_request("'" + param + ".call_id' is required", param + ".call_id", "missing_required_parameter");
    }
    return id;
}

// The text of a message item's content: a string, or input_text / output_text parts.
std::string content_text(const json & content, const std::string & param) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array())
        throw bad_request("'" + param + "' must be a string or an array of parts", param, "invalid_value");
    std::string out;
    for (size_t i = 0; i < content.size(); ++i) {
        const json & p = content[i];
        const std::string pparam = param + "[" + std::to_string(i) + "]";
        const std::string type = string_in(p, "type", pparam);
        if (type == "input_text" || type == "output_text" || type == "text") {
            out += (out.empty() ? "" : "\n") + string_in(p, "text", pparam);
        } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
            throw bad_request("'" + pparam + "': " + type + " parts are not supported (text only)", pparam,
                              "unsupported_value");
        } else {
            throw bad_request("'" + pparam + "': unknown part type '" + type + "'", pparam, "invalid_value");
        }
    }
    return out;
}

void add_item(const json & item, size_t i, json & messages) {
    const std::string param = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) throw bad_request("'" + param + "' must be an object", param, "invalid_value");
    const std::string type = string_in(item, "type", param, "message");
    if (type == "message") {
        std::string role = string_in(item, "role", param);
        if (role == "developer") role = "system";
        if (role != "user" && role != "assistant" && role != "system") {
            throw bad_request("'" + param + ".role' must be user, assistant, system or developer", param,
                              "invalid_value");
        }
        messages.push_back(
            {{"role", role}, {"content", content_text(item.contains("content") ? item["content"] : json(""), param)}});
    } else if (type == "function_call") {
        const json call = {
            {"id", string_in(item, "call_id", param, string_in(item, "id", param))},
            {"type", "function"},
            {"function",
             {{"name", string_in(item, "name", param)}, {"arguments", string_in(item, "arguments", param)}}}};
        // Calls of one turn join the assistant message before them.
        if (!messages.empty() && messages.back()["role"] == "assistant") {
            messages.back()["tool_calls"].push_back(call);
        } else {
            messages.push_back({{"role", "assistant"}, {"tool_calls", json::array({call})}});
        }
    } else if (type == "function_call_output") {
        const json & out = item.contains("output") ? item["output"] : json("");
        messages.push_back({{"role", "tool"},
                            {"tool_call_id", call_id_of(item, param)},
                            {"content", out.is_string() ? out.get<std::string>() : out.dump()}});
    } else if (type == "reasoning") {
        return;  // earlier thinking: not rendered again
    } else {
        throw bad_request("'" + param + "': items of type '" + type + "' are not supported", param,
                          "unsupported_value");
    }
}

}  // namespace

json chat_body_from_responses(const json & in) {
    if (in.contains("previous_response_id") && !in["previous_response_id"].is_null()) {
        throw bad_request(
            "'previous_response_id' is not supported: this server keeps no responses; send the "
            "conversation in 'input'",
            "previous_response_id", "unsupported_value");
    }
    json messages = json::array();
    if (in.contains("instructions") && in["instructions"].is_string()) {
        messages.push_back({{"role", "system"}, {"content", in["instructions"]}});
    }
    if (!in.contains("input")) throw bad_request("'input' is required", "input", "missing_required_parameter");
    const json & input = in["input"];
    if (input.is_string()) {
        messages.push_back({{"role", "user"}, {"content", input}});
    } else if (input.is_array()) {
        for (size_t i = 0; i < input.size(); ++i) add_item(input[i], i, messages);
    } else {
        throw bad_request("'input' must be a string or an array of items", "input", "invalid_value");
    }
    json body = {{"messages", messages}};
    for (const char * same : {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "tool_choice"}) {
        if (in.contains(same)) body[same] = in[same];
    }
    if (body.contains("tool_choice") && body["tool_choice"].is_object()) {
        const std::string name = string_in(body["tool_choice"], "name", "tool_choice");
        body["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
    }
    if (in.contains("max_output_tokens")) body["max_tokens"] = in["max_output_tokens"];
    if (in.contains("tools")) {
        if (!in["tools"].is_array()) throw bad_request("'tools' must be an array", "tools", "invalid_value");
        json tools = json::array();
        for (size_t i = 0; i < in["tools"].size(); ++i) {
            const json & t = in["tools"][i];
            const std::string param = "tools[" + std::to_string(i) + "]";
            if (string_in(t, "type", param) != "function") {
                throw bad_request("'" + param + "': only function tools are supported", param, "unsupported_value");
            }
            json fn = {{"name", string_in(t, "name", param)}, {"parameters", t.value("parameters", json::object())}};
            if (t.contains("description")) fn["description"] = t["description"];
            tools.push_back({{"type", "function"}, {"function", fn}});
        }
        body["tools"] = tools;
    }
    if (in.contains("text") && in["text"].is_object() && in["text"].contains("format")) {
        const json & f = in["text"]["format"];
        const std::string type = string_in(f, "type", "text.format", "text");
        if (type == "json_schema") {
            body["response_format"] = {{"type", "json_schema"},
                                       {"json_schema", {{"schema", f.value("schema", json::object())}}}};
        } else if (type == "json_object") {
            body["response_format"] = {{"type", "json_object"}};
        }
    }
    if (in.contains("reasoning") && in["reasoning"].is_object() && in["reasoning"].contains("effort")) {
        body["reasoning_effort"] = in["reasoning"]["effort"];
    }
    return body;
}

namespace {

class ResponsesReply final : public ReplyShape {
  public:
    ResponsesReply(const ResponseContext & ctx, std::shared_ptr<ChatOutputParser> parser, int32_t n_prompt)
        : ctx_(ctx), parser_(std::move(parser)), n_prompt_(n_prompt), id_(random_id("resp_")) {}

    json whole(const GeneratedText & out, const TaskEvent & done) override {
        const AssistantMessage m = parser_ ? parser_->parse(out.text) : AssistantMessage{out.text, "", {}};
        json output = json::array();
        if (!m.reasoning_content.empty()) output.push_back(reasoning_item(random_id("rs_"), m.reasoning_content));
        if (!m.content.empty() || m.tool_calls.empty()) output.push_back(message_item(random_id("msg_"), m.content));
        for (const ToolCall & c : m.tool_calls)
            output.push_back(call_item(random_id("fc_"), c.id, c.name, c.arguments));
        return response(output, &done);
    }

    std::string stream_start() override {
        std::string out = event("response.created", {{"response", response(json::array(), nullptr)}});
        return out + event("response.in_progress", {{"response", response(json::array(), nullptr)}});
    }

    std::string stream_text(const TaskEvent & e) override {
        if (!parser_) return text_delta("message", e.text);
        text_ += e.text;
        return parsed(false);
    }

    std::string stream_done(const TaskEvent & done) override {
        std::string out = parser_ ? parsed(true) : "";
        out += close_item();
        return out + event("response.completed", {{"response", response(items_, &done)}});
    }

    std::string stream_error(const ApiError & e) override {
        return event("error", {{"code", e.code}, {"message", e.what()}, {"param", e.param}});
    }

  private:
    json response(const json & output, const TaskEvent * done) const {
        json r = {{"id", id_},
                  {"object", "response"},
                  {"created_at", ctx_.created},
                  {"status", done == nullptr              ? "in_progress"
                             : done->stop_type == "limit" ? "incomplete"
                                                          : "completed"},
                  {"model", ctx_.model},
                  {"output", output},
                  {"incomplete_details", nullptr},
                  {"completed_at", nullptr},
                  {"usage", nullptr}};
        if (done != nullptr) {
            r["completed_at"] =
                std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                    .count();
            if (done->stop_type == "limit") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
            r["usage"] = {{"input_tokens", done->n_prompt},
                          {"input_tokens_details", {{"cached_tokens", done->n_cached}}},
                          {"output_tokens", done->n_completion},
                          {"output_tokens_details", {{"reasoning_tokens", 0}}},
                          {"total_tokens", done->n_prompt + done->n_completion}};
        } else {
            r["usage"] = {{"input_tokens", n_prompt_}, {"output_tokens", 0}, {"total_tokens", n_prompt_}};
        }
        return r;
    }

    static json reasoning_item(const std::string & id, const std::string & text) {
        return {{"type", "reasoning"},
                {"id", id},
                {"summary", json::array()},
                {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
    }
    static json message_item(const std::string & id, const std::string & text) {
        return {{"type", "message"},
                {"id", id},
                {"status", "completed"},
                {"role", "assistant"},
                {"content", json::array({{{"type", "output_text"},
                                          {"text", text},
                                          {"annotations", json::array()},
                                          {"logprobs", json::array()}}})}};
    }
    static json call_item(const std::string & id, const std::string & call_id, const std::string & name,
                          const std::string & arguments) {
        return {{"type", "function_call"}, {"id", id}, {"call_id", call_id}, {"name", name}, {"arguments", arguments},
                {"status", "completed"}};
    }

    std::string event(const char * type, json data) {
        data["type"] = type;
        data["sequence_number"] = sequence_++;
        return std::string("event: ") + type + "\ndata: " + dump_json(data) + "\n\n";
    }

    // Text for a reasoning or message item, opening it if another is open.
    std::string text_delta(const std::string & kind, const std::string & piece) {
        if (piece.empty()) return "";
        std::string out;
        if (open_ != kind) {
            out += close_item();
            open_ = kind;
            item_id_ = random_id(kind == "message" ? "msg_" : "rs_");
            item_text_.clear();
            json item = kind == "message" ? message_item(item_id_, "") : reasoning_item(item_id_, "");
            item["status"] = "in_progress";
            if (kind == "message") item["content"] = json::array();
            out += event("response.output_item.added", {{"output_index", items_.size()}, {"item", item}});
            if (kind == "message") {
                out += event("response.content_part.added", {{"item_id", item_id_},
                                                             {"output_index", items_.size()},
                                                             {"content_index", 0},
                                                             {"part",
                                                              {{"type", "output_text"},
                                                               {"text", ""},
                                                               {"annotations", json::array()},
                                                               {"logprobs", json::array()}}}});
            }
        }
        item_text_ += piece;
        const char * type = kind == "message" ? "response.output_text.delta" : "response.reasoning_text.delta";
        return out +
               event(type,
                     {{"item_id", item_id_}, {"output_index", items_.size()}, {"content_index", 0}, {"delta", piece}});
    }

    std::string call_delta(const json & call) {
        std::string out;
        const size_t n = call.value("index", (size_t) 0);
        const json fn = call.contains("function") ? call["function"] : json::object();
        if (open_ != "function_call" || n != call_index_) {
            out += close_item();
            open_ = "function_call";
            call_index_ = n;
            item_id_ = random_id("fc_");
            call_id_ = call.value("id", "");
            call_name_ = fn.value("name", "");
            item_text_.clear();
            json item = call_item(item_id_, call_id_, call_name_, "");
            item["status"] = "in_progress";
            out += event("response.output_item.added", {{"output_index", items_.size()}, {"item", item}});
        }
        const std::string args = fn.value("arguments", "");
        if (args.empty()) return out;
        item_text_ += args;
        return out + event("response.function_call_arguments.delta",
                           {{"item_id", item_id_}, {"output_index", items_.size()}, {"delta", args}});
    }

    std::string close_item() {
        if (open_.empty()) return "";
        std::string out;
        const size_t index = items_.size();
        json item;
        if (open_ == "message") {
            item = message_item(item_id_, item_text_);
            out += event("response.output_text.done",
                         {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"text", item_text_}});
            out += event(
                "response.content_part.done",
                {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"part", item["content"][0]}});
        } else if (open_ == "reasoning") {
            item = reasoning_item(item_id_, item_text_);
            out += event("response.reasoning_text.done",
                         {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"text", item_text_}});
        } else {
            item = call_item(item_id_, call_id_, call_name_, item_text_);
            out += event("response.function_call_arguments.done",
                         {{"item_id", item_id_}, {"output_index", index}, {"arguments", item_text_}});
        }
        out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
        items_.push_back(item);
        open_.clear();
        return out;
    }

    std::string parsed(bool final) {
        std::string out;
        for (const json & d : parser_->stream_deltas(text_, final)) {
            if (d.contains("reasoning_content")) out += text_delta("reasoning", d["reasoning_content"]);
            if (d.contains("content")) out += text_delta("message", d["content"]);
            if (d.contains("tool_calls")) {
                for (const json & c : d["tool_calls"]) out += call_delta(c);
            }
        }
        return out;
    }

    ResponseContext ctx_;
    std::shared_ptr<ChatOutputParser> parser_;
    int32_t n_prompt_;
    std::string id_;
    std::string text_;            // everything so far, for the parser
    json items_ = json::array();  // the output items closed so far
    std::string open_;            // the open item's type ("" none)
    std::string item_id_, item_text_, call_id_, call_name_;
    size_t call_index_ = 0;
    int64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<ReplyShape> responses_reply(const ResponseContext & ctx, std::shared_ptr<ChatOutputParser> parser,
                                            int32_t n_prompt) {
    return std::make_unique<ResponsesReply>(ctx, std::move(parser), n_prompt);
}

}  // namespace llama_tp::server
