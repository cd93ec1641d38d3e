#pragma once
// Reads an assistant turn out of generated text with libcommon's parser for the
// chat format the template chose: content, reasoning (thinking) and tool calls,
// for whole responses and as stream deltas.

#include "server/chat/tools.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace llama_tp::server {

using json = nlohmann::json;

// What libcommon's template application says about parsing the output.
struct ChatSyntax {
    int format = 0;                 // common_chat_format
    std::string generation_prompt;  // text the template put after the last turn
    std::string parser;             // serialized PEG parser; "" -> content only
    int reasoning_format = 0;       // common_reasoning_format; none: thinking stays in content
    bool parse_reasoning = false;   // the template thinks, and the format extracts it
    bool parse_tool_calls = false;
    bool reasoning_in_content = false;  // deepseek-legacy while streaming: <think> stays inline
};

struct AssistantMessage {
    std::string content;
    std::string reasoning_content;
    std::vector<ToolCall> tool_calls;
};

class ChatOutputParser {
  public:
    explicit ChatOutputParser(const ChatSyntax & syntax);
    ~ChatOutputParser();
    ChatOutputParser(const ChatOutputParser &) = delete;
    ChatOutputParser & operator=(const ChatOutputParser &) = delete;

    // The complete output. Text the parser rejects is returned as content.
    AssistantMessage parse(const std::string & text);

    // OpenAI `delta` objects ({"content"}, {"reasoning_content"} or {"tool_calls": [...]}) for what
    // `text_so_far` adds to the previous call's text; `final` on the last call.
    // Tool call ids stay the same across calls and match parse().
    std::vector<json> stream_deltas(const std::string & text_so_far, bool final);

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace llama_tp::server
