#include "server/chat/tool_grammar.h"

#include "runtime/text/sampler.h"
#include "runtime/text/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstring>
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

std::vector<int32_t> preserved_token_ids(const Tokenizer & tokenizer, const std::vector<std::string> & preserved) {
    std::vector<int32_t> ids;
    for (const std::string & text : preserved) {
        const std::vector<int32_t> t = tokenizer.tokenize(text, false, true);
        if (t.size() == 1) ids.push_back(t[0]);
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
}

namespace {

std::string regex_escaped(const std::string & text) {
    std::string out;
    for (char c : text) {
        if (std::strchr(".^$|()[]{}*+?\\", c) != nullptr) out += '\\';
        out += c;
    }
    return out;
}

// The pattern must match the whole output: anchored at both ends.
std::string anchored(const std::string & pattern) {
    if (pattern.empty()) return "^$";
    return (pattern.front() == '^' ? "" : "^") + pattern + (pattern.back() == '$' ? "" : "$");
}

}  // namespace

bool set_lazy_triggers(const Tokenizer & tokenizer, const std::vector<GrammarTrigger> & triggers,
                       const std::vector<int32_t> & preserved, SamplingParams & params) {
    std::vector<std::string> patterns;
    std::vector<int32_t> tokens;
    for (const GrammarTrigger & t : triggers) {
        switch (t.kind) {
            case GrammarTrigger::Kind::Word: {
                const std::vector<int32_t> ids = tokenizer.tokenize(t.value, false, true);
                if (ids.size() == 1 && std::binary_search(preserved.begin(), preserved.end(), ids[0])) {
                    tokens.push_back(ids[0]);
                } else {
                    patterns.push_back(regex_escaped(t.value));
                }
                break;
            }
            case GrammarTrigger::Kind::Pattern:
                patterns.push_back(t.value);
                break;
            case GrammarTrigger::Kind::PatternFull:
                patterns.push_back(anchored(t.value));
                break;
            case GrammarTrigger::Kind::Token: {
                const std::vector<int32_t> ids =
                    t.token >= 0 ? std::vector<int32_t>{t.token} : tokenizer.tokenize(t.value, false, true);
                if (ids.size() == 1) tokens.push_back(ids[0]);
                break;
            }
        }
    }
    if (patterns.empty() && tokens.empty()) return false;
    params.grammar_lazy = true;
    params.grammar_trigger_patterns = std::move(patterns);
    params.grammar_trigger_tokens = std::move(tokens);
    return true;
}

}  // namespace llama_tp::server
