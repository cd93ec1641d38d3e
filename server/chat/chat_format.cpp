#include "server/chat/chat_format.h"

#include "runtime/text/tokenizer.h"
#include "server/chat/template_depth.h"
#include "server/chat/template_probe.h"
#include "server/chat/template_sandbox.h"
#include "server/log.h"

#include "chat.h"
#include "common.h"
#include "llama.h"

#include <stdexcept>
#include <system_error>

#include <unistd.h>

namespace llama_tp::server {

struct ChatFormatter::Impl {
    common_chat_templates_ptr templates;
    bool use_jinja = true;
    // Renders each conversation first where the template's macros can reach
    // themselves (template_sandbox.h); none elsewhere.
    std::unique_ptr<TemplateSandbox> sandbox;
    bool add_bos = false;
    bool add_eos = false;
};

namespace {

bool is_builtin_template_name(const std::string & name) {
    const int32_t n = llama_chat_builtin_templates(nullptr, 0);
    std::vector<const char *> names((size_t) std::max(n, 0));
    llama_chat_builtin_templates(names.data(), names.size());
    for (const char * s : names) {
        if (name == s) {
            return true;
        }
    }
    return false;
}

}  // namespace

ChatFormatter::ChatFormatter(const Tokenizer & tokenizer, const std::string & override_template)
    : ChatFormatter(tokenizer, override_template, Probe::InChild) {}

namespace {

// A token's text as libcommon's templates see it ("" where there is none).
std::string token_text(const llama_model * model, llama_token token) {
    if (!model || token == LLAMA_TOKEN_NULL) return "";
    return common_token_to_piece(llama_model_get_vocab(model), token, true);
}

}  // namespace

std::string ChatFormatter::renderer_config(const llama_model * model) const {
    const llama_vocab * vocab = model ? llama_model_get_vocab(model) : nullptr;
    return nlohmann::json{
        {"default", source()},
        {"tool_use", tool_use_source()},
        {"bos", vocab ? token_text(model, llama_vocab_bos(vocab)) : ""},
        {"eos", vocab ? token_text(model, llama_vocab_eos(vocab)) : ""},
    }
        .dump();
}

ChatFormatter::ChatFormatter(const Tokenizer & tokenizer, const std::string & override_template, Probe probe)
    : impl_(std::make_unique<Impl>()) {
    const llama_model * model = tokenizer.model();
    if (!override_template.empty()) {
        if (override_template != "chatml" && is_builtin_template_name(override_template)) {
            impl_->use_jinja = false;  // libllama's own formatter, chosen by name
            origin_ = "builtin:" + override_template;
        } else {
            origin_ = "override";
        }
    } else {
        origin_ = tokenizer.chat_template().empty() ? "chatml-fallback" : "model";
    }
    if (impl_->use_jinja) {
        if (!override_template.empty()) {
            check_template_depth(override_template, "--chat-template");
        } else {
            check_template_depth(tokenizer.chat_template(), "the model's tokenizer.chat_template");
            check_template_depth(tokenizer.chat_template("tool_use"), "the model's tokenizer.chat_template.tool_use");
        }
        const std::string source = override_template.empty()
                                       ? tokenizer.chat_template() + tokenizer.chat_template("tool_use")
                                       : override_template;
        if (probe == Probe::InChild && template_may_recurse(source)) {
            probe_render_in_child(
                [&] { ChatFormatter(tokenizer, override_template, Probe::Done); },
                override_template.empty() ? "the model's tokenizer.chat_template" : "--chat-template");
        }
    }
    try {
        impl_->templates = common_chat_templates_init(model, override_template);
    } catch (const std::exception & e) {
        throw std::runtime_error(std::string("chat template does not parse: ") + e.what());
    }
    supports_thinking_ = impl_->use_jinja && common_chat_templates_support_enable_thinking(impl_->templates.get());
    impl_->add_bos = tokenizer.add_bos();
    impl_->add_eos = false;
    if (probe == Probe::InChild && impl_->use_jinja && template_calls_itself(source())) {
        try {
            impl_->sandbox = std::make_unique<TemplateSandbox>(renderer_config(model), origin_, kRequestProbeSeconds);
        } catch (const std::system_error & e) {
            SRV_WRN(
                "%s: each conversation is rendered here only (a template that recurses without end for one "
                "would stop the server)",
                e.what());
        }
    }

    // Render a small conversation now, so that a broken template fails at
    // startup rather than on every request.
    try {
        ChatMessage system, user;
        system.role = "system";
        system.content = "You are helpful.";
        user.role = "user";
        user.content = "Hello";
        apply({system, user});
    } catch (const ApiError & e) {
        throw std::runtime_error(std::string("chat template cannot render a conversation: ") + e.what());
    }
}

ChatFormatter::~ChatFormatter() = default;

std::string ChatFormatter::source() const {
    return common_chat_templates_source(impl_->templates.get());
}

std::string ChatFormatter::tool_use_source() const {
    return common_chat_templates_source(impl_->templates.get(), "tool_use");
}

std::map<std::string, bool> ChatFormatter::capabilities() const {
    return common_chat_templates_get_caps(impl_->templates.get());
}

namespace {

common_chat_tool_choice to_common_choice(ToolChoice choice) {
    switch (choice) {
        case ToolChoice::Required:
            return COMMON_CHAT_TOOL_CHOICE_REQUIRED;
        case ToolChoice::None:
            return COMMON_CHAT_TOOL_CHOICE_NONE;
        case ToolChoice::Auto:
        default:
            return COMMON_CHAT_TOOL_CHOICE_AUTO;
    }
}

void add_tools(common_chat_templates_inputs & in, const ToolSet & tools) {
    for (const auto & t : tools.tools) {
        in.tools.push_back({t.name, t.description, t.parameters});
    }
    in.tool_choice = to_common_choice(tools.choice);
    in.parallel_tool_calls = tools.parallel_calls;
}

GrammarTrigger::Kind trigger_kind(common_grammar_trigger_type type) {
    switch (type) {
        case COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN:
            return GrammarTrigger::Kind::Token;
        case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN:
            return GrammarTrigger::Kind::Pattern;
        case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL:
            return GrammarTrigger::Kind::PatternFull;
        case COMMON_GRAMMAR_TRIGGER_TYPE_WORD:
        default:
            return GrammarTrigger::Kind::Word;
    }
}

}  // namespace

common_chat_templates_inputs ChatFormatter::inputs_of(const std::vector<ChatMessage> & messages, const ToolSet & tools,
                                                      const ChatTurnOptions & turn) const {
    common_chat_templates_inputs in;
    in.use_jinja = impl_->use_jinja;
    in.add_generation_prompt = !turn.continue_final_message;
    in.continue_final_message =
        turn.continue_final_message ? COMMON_CHAT_CONTINUATION_AUTO : COMMON_CHAT_CONTINUATION_NONE;
    in.reasoning_format = (common_reasoning_format) turn.reasoning_format;
    in.enable_thinking = turn.enable_thinking && supports_thinking_;
    in.chat_template_kwargs = turn.template_kwargs;
    in.force_pure_content = turn.pure_content;
    in.add_bos = impl_->add_bos;  // the tokenizer adds BOS: strip the template's
    in.add_eos = impl_->add_eos;
    for (const auto & m : messages) {
        common_chat_msg msg;
        msg.role = m.role;
        msg.content = m.content;
        msg.reasoning_content = m.reasoning_content;
        if (m.role == "tool") {
            msg.tool_name = m.name;
        }
        msg.tool_call_id = m.tool_call_id;
        for (const auto & tc : m.tool_calls) {
            msg.tool_calls.push_back({tc.name, tc.arguments, tc.id});
        }
        in.messages.push_back(std::move(msg));
    }
    add_tools(in, tools);
    return in;
}

namespace {

// What the renderer process needs of a conversation, and back.
nlohmann::json inputs_json(const common_chat_templates_inputs & in) {
    nlohmann::json messages = nlohmann::json::array(), tools = nlohmann::json::array();
    for (const common_chat_msg & m : in.messages) {
        nlohmann::json calls = nlohmann::json::array();
        for (const common_chat_tool_call & c : m.tool_calls) calls.push_back({c.name, c.arguments, c.id});
        messages.push_back({m.role, m.content, m.reasoning_content, m.tool_name, m.tool_call_id, calls});
    }
    for (const common_chat_tool & t : in.tools) tools.push_back({t.name, t.description, t.parameters});
    return {
        {"messages", messages},
        {"tools", tools},
        {"tool_choice", (int) in.tool_choice},
        {"parallel_tool_calls", in.parallel_tool_calls},
        {"use_jinja", in.use_jinja},
        {"add_generation_prompt", in.add_generation_prompt},
        {"continue_final_message", (int) in.continue_final_message},
        {"reasoning_format", (int) in.reasoning_format},
        {"enable_thinking", in.enable_thinking},
        {"chat_template_kwargs", in.chat_template_kwargs},
        {"force_pure_content", in.force_pure_content},
        {"add_bos", in.add_bos},
        {"add_eos", in.add_eos},
    };
}

common_chat_templates_inputs inputs_from_json(const nlohmann::json & j) {
    common_chat_templates_inputs in;
    for (const auto & m : j.at("messages")) {
        common_chat_msg msg;
        msg.role = m.at(0);
        msg.content = m.at(1);
        msg.reasoning_content = m.at(2);
        msg.tool_name = m.at(3);
        msg.tool_call_id = m.at(4);
        for (const auto & c : m.at(5)) msg.tool_calls.push_back({c.at(0), c.at(1), c.at(2)});
        in.messages.push_back(std::move(msg));
    }
    for (const auto & t : j.at("tools")) in.tools.push_back({t.at(0), t.at(1), t.at(2)});
    in.tool_choice = (common_chat_tool_choice) j.at("tool_choice").get<int>();
    in.parallel_tool_calls = j.at("parallel_tool_calls");
    in.use_jinja = j.at("use_jinja");
    in.add_generation_prompt = j.at("add_generation_prompt");
    in.continue_final_message = (common_chat_continuation) j.at("continue_final_message").get<int>();
    in.reasoning_format = (common_reasoning_format) j.at("reasoning_format").get<int>();
    in.enable_thinking = j.at("enable_thinking");
    in.chat_template_kwargs = j.at("chat_template_kwargs").get<std::map<std::string, std::string>>();
    in.force_pure_content = j.at("force_pure_content");
    in.add_bos = j.at("add_bos");
    in.add_eos = j.at("add_eos");
    return in;
}

}  // namespace

int run_chat_template_renderer() {
    // It ends when the server closes its end of stdin, however the server
    // ends, and each render is cut at the server's deadline and a little
    // more, by SIGALRM, should the server be gone by then. (A parent-death
    // signal would come when the server thread that started it ends.)
    constexpr unsigned kRenderSeconds = kRequestProbeSeconds + 5;
    std::string frame;
    if (!read_frame(STDIN_FILENO, frame)) return 1;
    alarm(kRenderSeconds);
    common_chat_templates_ptr defaults, tool_use;
    try {
        const nlohmann::json c = nlohmann::json::parse(frame);
        const std::string bos = c.at("bos"), eos = c.at("eos"), tool_use_source = c.at("tool_use");
        defaults = common_chat_templates_init(nullptr, c.at("default").get<std::string>(), bos, eos);
        if (!tool_use_source.empty()) tool_use = common_chat_templates_init(nullptr, tool_use_source, bos, eos);
    } catch (const std::exception &) {
        return 1;
    }
    alarm(0);
    const char done = 1;
    if (write(STDOUT_FILENO, &done, 1) != 1) return 1;
    while (read_frame(STDIN_FILENO, frame)) {
        alarm(kRenderSeconds);
        try {
            const common_chat_templates_inputs in = inputs_from_json(nlohmann::json::parse(frame));
            common_chat_templates_apply((!in.tools.empty() && tool_use ? tool_use : defaults).get(), in);
        } catch (const std::exception &) {
            // The server meets the same exception rendering it itself.
        }
        alarm(0);
        if (write(STDOUT_FILENO, &done, 1) != 1) return 1;
    }
    return 0;
}

ChatPrompt ChatFormatter::apply(const std::vector<ChatMessage> & messages, const ToolSet & tools,
                                const ChatTurnOptions & turn) const {
    if (!tools.tools.empty() && !impl_->use_jinja) {
        throw bad_request(
            "tools need a Jinja chat template; the built-in template '" + origin_ + "' cannot render them", "tools",
            "unsupported_value");
    }
    const common_chat_templates_inputs in = inputs_of(messages, tools, turn);
    if (impl_->sandbox) {
        try {
            impl_->sandbox->render(inputs_json(in).dump());
        } catch (const std::runtime_error & e) {
            throw bad_request(e.what(), "messages", "template_error");
        }
    }
    ChatPrompt out;
    try {
        std::lock_guard<std::mutex> lock(mutex_);
        common_chat_params params = common_chat_templates_apply(impl_->templates.get(), in);
        out.prompt = std::move(params.prompt);
        out.stops = std::move(params.additional_stops);
        out.syntax.format = (int) params.format;
        out.syntax.generation_prompt = std::move(params.generation_prompt);
        out.syntax.parser = std::move(params.parser);
        out.syntax.reasoning_format = turn.reasoning_format;
        out.syntax.parse_reasoning = params.supports_thinking && turn.reasoning_format != COMMON_REASONING_FORMAT_NONE;
        out.syntax.parse_tool_calls = tools.active();
        out.tool_grammar = std::move(params.grammar);
        out.tool_grammar_lazy = params.grammar_lazy;
        for (const common_grammar_trigger & t : params.grammar_triggers) {
            out.tool_grammar_triggers.push_back({trigger_kind(t.type), t.value, (int32_t) t.token});
        }
        out.preserved_tokens = std::move(params.preserved_tokens);
        out.thinking_start = std::move(params.thinking_start_tag);
        out.thinking_ends = std::move(params.thinking_end_tags);
        for (const common_chat_msg_delimiter & d : params.message_delimiters.delimiters) {
            if (d.role == COMMON_CHAT_ROLE_USER && !d.delimiter.empty()) out.user_starts.push_back(d.delimiter);
        }
    } catch (const std::exception & e) {
        throw bad_request(std::string("the chat template failed on these messages: ") + e.what(), "messages",
                          "template_error");
    }
    if (origin_ == "chatml-fallback") {
        out.stops.push_back("<|im_end|>");
    }
    return out;
}

}  // namespace llama_tp::server
