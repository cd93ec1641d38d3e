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

#include "server/request.h"
#include "server/tool_call_parser.h"
#include "server/tool_grammar.h"
#include "server/tools.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace llama_tp {
class Tokenizer;
}

namespace llama_tp::server {

struct ChatPrompt {
    std::string prompt;
    std::vector<std::string> stops;  // stop strings the template implies

    // With tools: how to read the output, and the grammar that constrains it.
    ChatSyntax syntax;
    std::string tool_grammar;        // GBNF; "" when the format has none
    bool tool_grammar_lazy = false;  // applies only after a trigger
    std::vector<GrammarTrigger> tool_grammar_triggers;
    std::vector<std::string> preserved_tokens;  // special tokens the output must show as text
};

class ChatFormatter {
  public:
    // Throws std::runtime_error when the override template does not parse or
    // cannot render a simple conversation.
    ChatFormatter(const Tokenizer & tokenizer, const std::string & override_template);
    ~ChatFormatter();

    // Throws ApiError 400 when the template rejects the conversation or the
    // tools.
    ChatPrompt apply(const std::vector<ChatMessage> & messages, const ToolSet & tools = {}) const;

    // "model", "override", "builtin:<name>" or "chatml-fallback".
    const std::string & origin() const { return origin_; }
    std::string source() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::string origin_;
    mutable std::mutex mutex_;
};

}  // namespace llama_tp::server
