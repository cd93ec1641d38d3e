#pragma once
// Function tools of a chat request: the `tools` and `tool_choice` fields, and
// the tool calls of assistant turns in the history. Validation only; the
// chat template renders them and the tool-call parser reads the model's calls.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace llama_tp::server {

using json = nlohmann::json;

struct ToolCall {
    std::string id;
    std::string name;
    std::string arguments;  // a JSON object, as text
};

struct ToolDefinition {
    std::string name;
    std::string description;
    std::string parameters;  // JSON schema of the arguments, as text
};

enum class ToolChoice { Auto, Required, None };

struct ToolSet {
    std::vector<ToolDefinition> tools;
    ToolChoice choice = ToolChoice::Auto;
    bool parallel_calls = false;

    // Whether the model may call a tool at all.
    bool active() const { return !tools.empty() && choice != ToolChoice::None; }
};

// `tools`, `tool_choice` and `parallel_tool_calls` of a chat body. A choice
// naming one function keeps only that tool and makes a call required. Throws
// ApiError 400.
ToolSet parse_tool_set(const json & body);

// `tool_calls` of an assistant message; `param` names it in errors.
std::vector<ToolCall> parse_history_tool_calls(const json & calls, const std::string & param);

}  // namespace llama_tp::server
