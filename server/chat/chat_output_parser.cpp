#include "server/chat/chat_output_parser.h"

#include "server/log.h"
#include "server/api/response.h"

#include "chat.h"

namespace llama_tp::server {

namespace {

json tool_call_delta_json(const common_chat_msg_diff & diff) {
    json call = {{"index", diff.tool_call_index}};
    json fn = json::object();
    if (!diff.tool_call_delta.name.empty()) {
        // The first delta of a call names it; later ones only extend the arguments.
        call["id"] = diff.tool_call_delta.id;
        call["type"] = "function";
        fn["name"] = diff.tool_call_delta.name;
    }
    fn["arguments"] = diff.tool_call_delta.arguments;
    call["function"] = fn;
    return {{"tool_calls", json::array({call})}};
}

}  // namespace

struct ChatOutputParser::Impl {
    common_chat_parser_params params;
    common_chat_msg previous;      // what the stream has sent so far
    std::vector<std::string> ids;  // tool call ids by index, fixed once given

    // Throws when the text does not parse (final) or not yet (partial).
    common_chat_msg parse(const std::string & text, bool partial) {
        common_chat_msg msg = common_chat_parse(text, partial, params);
        msg.set_tool_call_ids(ids, [] { return random_id("call_"); });
        return msg;
    }
};

ChatOutputParser::ChatOutputParser(const ChatSyntax & syntax) : impl_(std::make_unique<Impl>()) {
    impl_->params.format = (common_chat_format) syntax.format;
    impl_->params.generation_prompt = syntax.generation_prompt;
    impl_->params.parse_tool_calls = syntax.parse_tool_calls;
    impl_->params.reasoning_format = (common_reasoning_format) syntax.reasoning_format;
    impl_->params.reasoning_in_content = syntax.reasoning_in_content;
    if (!syntax.parser.empty()) {
        impl_->params.parser.load(syntax.parser);
    }
}

ChatOutputParser::~ChatOutputParser() = default;

AssistantMessage ChatOutputParser::parse(const std::string & text) {
    AssistantMessage out;
    try {
        const common_chat_msg msg = impl_->parse(text, false);
        out.content = msg.content;
        out.reasoning_content = msg.reasoning_content;
        for (const auto & tc : msg.tool_calls) {
            out.tool_calls.push_back({tc.id, tc.name, tc.arguments});
        }
    } catch (const std::exception & e) {
        SRV_DBG("output does not parse as tool calls (%s); returning it as content", e.what());
        out.content = text;
    }
    return out;
}

std::vector<json> ChatOutputParser::stream_deltas(const std::string & text_so_far, bool final) {
    common_chat_msg msg;
    try {
        msg = impl_->parse(text_so_far, !final);
    } catch (const std::exception & e) {
        if (!final) {
            return {};  // not parseable yet: wait for more text
        }
        msg = impl_->previous;
        msg.content = text_so_far;  // send what was held back as plain content
    }
    std::vector<common_chat_msg_diff> diffs;
    try {
        diffs = common_chat_msg_diff::compute_diffs(impl_->previous, msg);
    } catch (const std::exception & e) {
        // A partial parse took back something already sent: wait for more text.
        SRV_DBG("skipping an inconsistent partial parse: %s", e.what());
        return {};
    }
    std::vector<json> deltas;
    for (const auto & diff : diffs) {
        if (!diff.reasoning_content_delta.empty()) {
            deltas.push_back({{"reasoning_content", diff.reasoning_content_delta}});
        }
        if (!diff.content_delta.empty()) {
            deltas.push_back({{"content", diff.content_delta}});
        }
        if (diff.tool_call_index != std::string::npos) {
            deltas.push_back(tool_call_delta_json(diff));
        }
    }
    impl_->previous = std::move(msg);
    return deltas;
}

}  // namespace llama_tp::server
