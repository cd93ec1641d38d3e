#pragma once
// Chat messages -> prompt text, through libcommon's chat templates.
//
// Template choice: --chat-template / --chat-template-file when given (Jinja
// source, or the name of one of libllama's built-in templates such as
// "llama3"), else the model's own template (tokenizer.chat_template), else
// libcommon's ChatML fallback:
//     <|im_start|>system\n...<|im_end|>\n<|im_start|>user\n...<|im_end|>\n<|im_start|>assistant\n
// With the fallback, "<|im_end|>" is also a stop string, since a model that
// was not trained on ChatML may still write it out as text.

#include "server/api/request.h"
#include "server/chat/chat_output_parser.h"
#include "server/chat/tool_grammar.h"
#include "server/chat/tools.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct common_chat_templates_inputs;
struct llama_model;

namespace llama_tp {
class Tokenizer;
}

namespace llama_tp::server {

// How a conversation is rendered beyond its messages: thinking, the template's
// extra variables, and whether the last assistant message is continued.
struct ChatTurnOptions {
    int reasoning_format = 1;  // common_reasoning_format (auto)
    bool enable_thinking = true;
    std::map<std::string, std::string> template_kwargs;  // name -> JSON value
    bool continue_final_message = false;                 // prefill: go on with the last assistant turn
    bool pure_content = false;  // the output is all content: no thinking or tool calls read out of it
};

struct ChatPrompt {
    std::string prompt;
    std::vector<std::string> stops;  // stop strings the template implies

    // With tools: how to read the output, and the grammar that constrains it.
    ChatSyntax syntax;
    std::string tool_grammar;        // GBNF; "" when the format has none
    bool tool_grammar_lazy = false;  // applies only after a trigger
    std::vector<GrammarTrigger> tool_grammar_triggers;
    std::vector<std::string> preserved_tokens;  // special tokens the output must show as text
    // The tags of the template's thinking block (none: it has no block we know).
    std::string thinking_start;
    std::vector<std::string> thinking_ends;
    // The text that opens a user message in this template (libcommon's
    // message delimiters; none where it finds none): context checkpoints are
    // taken where one starts.
    std::vector<std::string> user_starts;
};

class ChatFormatter {
  public:
    // Throws std::runtime_error when the override template does not parse,
    // cannot render a simple conversation, or crashes its engine doing so
    // (server/chat/template_probe.h).
    ChatFormatter(const Tokenizer & tokenizer, const std::string & override_template);
    ~ChatFormatter();

    // Throws ApiError 400 when the template rejects the conversation or the
    // tools.
    ChatPrompt apply(const std::vector<ChatMessage> & messages, const ToolSet & tools = {},
                     const ChatTurnOptions & turn = {}) const;

    // The template renders thinking on or off (an enable_thinking variable).
    bool supports_thinking() const { return supports_thinking_; }

    // "model", "override", "builtin:<name>" or "chatml-fallback".
    const std::string & origin() const { return origin_; }
    std::string source() const;
    // The template's tool-use variant (tokenizer.chat_template.tool_use), "" without one.
    std::string tool_use_source() const;
    // What the template can render (libcommon's capability probe: tools,
    // system role, thinking...), as llama-server's /props shows it.
    std::map<std::string, bool> capabilities() const;

  private:
    enum class Probe { InChild, Done };
    ChatFormatter(const Tokenizer & tokenizer, const std::string & override_template, Probe probe);
    // libcommon's inputs for a conversation.
    common_chat_templates_inputs inputs_of(const std::vector<ChatMessage> & messages, const ToolSet & tools,
                                           const ChatTurnOptions & turn) const;
    // What the renderer process of template_sandbox.h starts from: the
    // templates and the BOS and EOS texts they see.
    std::string renderer_config(const llama_model * model) const;

    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::string origin_;
    bool supports_thinking_ = false;
    mutable std::mutex mutex_;
};

// The chat template renderer process (template_sandbox.h): main runs it for
// kTemplateRendererArgument. Returns its exit status.
int run_chat_template_renderer();

}  // namespace llama_tp::server
