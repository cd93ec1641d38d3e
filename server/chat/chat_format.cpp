#include "server/chat/chat_format.h"

#include "runtime/text/tokenizer.h"
#include "server/chat/template_depth.h"
#include "server/chat/template_probe.h"

#include "chat.h"
#include "llama.h"

#include <stdexcept>

namespace llama_tp::server {

struct ChatFormatter::Impl {
    common_chat_templates_ptr templates;
    bool use_jinja = true;
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

ChatPrompt ChatFormatter::apply(const std::vector<ChatMessage> & messages, const ToolSet & tools,
                                const ChatTurnOptions & turn) const {
    if (!tools.tools.empty() && !impl_->use_jinja) {
        throw bad_request(
            "tools need a Jinja chat template; the built-in template '" + origin_ + "' cannot render them", "tools",
            "unsupported_value");
    }
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
