#include "server/chat/tools.h"

#include "server/http/api_error.h"

namespace llama_tp::server {

namespace {

ApiError invalid(const std::string & param, const std::string & what, const char * code = "invalid_type") {
    return bad_request("'" + param + "' " + what, param, code);
}

// OpenAI's rule for function names: 1-64 of [a-zA-Z0-9_-].
bool is_valid_function_name(const std::string & name) {
    if (name.empty() || name.size() > 64) {
        return false;
    }
    for (char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                        c == '-' || c == '.';
        if (!ok) {
            return false;
        }
    }
    return true;
}

const json * present(const json & obj, const char * name) {
    const auto it = obj.find(name);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string function_name(const json & fn, const std::string & param) {
    const json * name = present(fn, "name");
    if (name == nullptr) {
        throw bad_request("'" + param + ".name' is required", param + ".name", "missing_required_parameter");
    }
    if (!name->is_string()) {
        throw invalid(param + ".name", "must be a string");
    }
    if (!is_valid_function_name(name->get<std::string>())) {
        throw invalid(param + ".name", "must be 1 to 64 letters, digits, '_', '-' or '.'", "invalid_value");
    }
    return name->get<std::string>();
}

ToolDefinition parse_tool(const json & tool, const std::string & param) {
    if (!tool.is_object()) {
        throw invalid(param, "must be an object");
    }
    const json * type = present(tool, "type");
    if (type == nullptr || !type->is_string() || *type != "function") {
        throw invalid(param + ".type", "must be \"function\"", "invalid_value");
    }
    const json * fn = present(tool, "function");
    if (fn == nullptr || !fn->is_object()) {
        throw invalid(param + ".function", "must be an object");
    }
    ToolDefinition def;
    def.name = function_name(*fn, param + ".function");
    if (const json * d = present(*fn, "description")) {
        if (!d->is_string()) {
            throw invalid(param + ".function.description", "must be a string");
        }
        def.description = d->get<std::string>();
    }
    if (const json * p = present(*fn, "parameters")) {
        if (!p->is_object()) {
            throw invalid(param + ".function.parameters", "must be a JSON schema object");
        }
        def.parameters = p->dump();
    } else {
        def.parameters = R"({"type":"object","properties":{}})";
    }
    if (const json * strict = present(*fn, "strict"); strict != nullptr && !strict->is_boolean()) {
        throw invalid(param + ".function.strict", "must be a boolean");
    }
    return def;
}

std::vector<ToolDefinition> parse_tools(const json & body) {
    std::vector<ToolDefinition> tools;
    const json * t = present(body, "tools");
    if (t == nullptr) {
        return tools;
    }
    if (!t->is_array()) {
        throw invalid("tools", "must be an array");
    }
    for (size_t i = 0; i < t->size(); i++) {
        ToolDefinition def = parse_tool((*t)[i], "tools[" + std::to_string(i) + "]");
        for (const auto & other : tools) {
            if (other.name == def.name) {
                throw bad_request("'tools' defines function '" + def.name + "' twice", "tools", "invalid_value");
            }
        }
        tools.push_back(std::move(def));
    }
    return tools;
}

// Keeps only the tool the choice names.
void restrict_to_named_tool(ToolSet & set, const json & choice) {
    const json * type = present(choice, "type");
    const json * fn = present(choice, "function");
    if (type == nullptr || !type->is_string() || *type != "function" || fn == nullptr || !fn->is_object()) {
        throw invalid("tool_choice",
                      "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                      "\"function\": {\"name\": ...}}",
                      "invalid_value");
    }
    const std::string name = function_name(*fn, "tool_choice.function");
    for (auto & tool : set.tools) {
        if (tool.name == name) {
            ToolDefinition chosen = std::move(tool);
            set.tools = {std::move(chosen)};
            set.choice = ToolChoice::Required;
            return;
        }
    }
    throw bad_request("'tool_choice' names function '" + name + "', which is not in 'tools'", "tool_choice",
                      "invalid_value");
}

}  // namespace

ToolSet parse_tool_set(const json & body) {
    ToolSet set;
    set.tools = parse_tools(body);
    if (const json * p = present(body, "parallel_tool_calls")) {
        if (!p->is_boolean()) {
            throw invalid("parallel_tool_calls", "must be a boolean");
        }
        set.parallel_calls = p->get<bool>();
    }
    const json * choice = present(body, "tool_choice");
    if (choice == nullptr) {
        return set;
    }
    if (choice->is_string()) {
        const std::string c = choice->get<std::string>();
        if (c == "auto") {
            set.choice = ToolChoice::Auto;
        } else if (c == "none") {
            set.choice = ToolChoice::None;
        } else if (c == "required") {
            set.choice = ToolChoice::Required;
        } else {
            throw invalid("tool_choice", "must be \"auto\", \"none\" or \"required\"; got \"" + c + "\"",
                          "invalid_value");
        }
    } else if (choice->is_object()) {
        restrict_to_named_tool(set, *choice);
    } else {
        throw invalid("tool_choice", "must be a string or an object");
    }
    if (set.choice == ToolChoice::Required && set.tools.empty()) {
        throw bad_request("'tool_choice' requires a tool call, but 'tools' is empty", "tool_choice", "invalid_value");
    }
    return set;
}

std::vector<ToolCall> parse_history_tool_calls(const json & calls, const std::string & param) {
    if (!calls.is_array()) {
        throw invalid(param, "must be an array");
    }
    std::vector<ToolCall> out;
    for (size_t i = 0; i < calls.size(); i++) {
        const std::string p = param + "[" + std::to_string(i) + "]";
        const json & call = calls[i];
        if (!call.is_object()) {
            throw invalid(p, "must be an object");
        }
        const json * fn = present(call, "function");
        if (fn == nullptr || !fn->is_object()) {
            throw invalid(p + ".function", "must be an object");
        }
        ToolCall tc;
        tc.name = function_name(*fn, p + ".function");
        if (const json * id = present(call, "id")) {
            if (!id->is_string()) {
                throw invalid(p + ".id", "must be a string");
            }
            tc.id = id->get<std::string>();
        }
        const json * args = present(*fn, "arguments");
        if (args == nullptr) {
            tc.arguments = "{}";
        } else if (args->is_string()) {
            tc.arguments = args->get<std::string>();
        } else if (args->is_object()) {
            tc.arguments = args->dump();  // lenient: some clients send the object itself
        } else {
            throw invalid(p + ".function.arguments", "must be a string holding a JSON object");
        }
        out.push_back(std::move(tc));
    }
    return out;
}

}  // namespace llama_tp::server
