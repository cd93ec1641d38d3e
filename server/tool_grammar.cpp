#include "server/tool_grammar.h"

#include "plugin/tokenizer.h"

#include <cctype>
#include <regex>

namespace llama_tp::server {

std::string calls_only_grammar(const std::string & grammar) {
    // libcommon writes the leading text as an optional "until" rule in root:
    //     root ::= "<prompt>" space until-N? tool-calls
    static const std::regex leading_text(R"((^|\n)(root ::= .*?) until-[0-9]+\? )");
    return std::regex_replace(grammar, leading_text, "$1$2 ", std::regex_constants::format_first_only);
}

std::vector<int32_t> grammar_prefill_tokens(const Tokenizer & tokenizer, const std::string & generation_prompt) {
    std::vector<int32_t> tokens = tokenizer.tokenize(generation_prompt, false, true);
    if (!tokens.empty() && !generation_prompt.empty() && !std::isspace((unsigned char) generation_prompt[0])) {
        const std::string first = tokenizer.piece(tokens[0], true);
        if (!first.empty() && std::isspace((unsigned char) first[0])) {
            tokens.erase(tokens.begin());
        }
    }
    return tokens;
}

}  // namespace llama_tp::server
