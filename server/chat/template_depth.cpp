#include "server/chat/template_depth.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace llama_tp::server {

namespace {

// The statement's first word: "if", "endfor", ...
std::string keyword(const std::string & s, size_t from, size_t to) {
    while (from < to && (s[from] == '-' || s[from] == '+' || std::isspace((unsigned char) s[from]))) ++from;
    size_t end = from;
    while (end < to && (std::isalnum((unsigned char) s[end]) || s[end] == '_')) ++end;
    return s.substr(from, end - from);
}

// Whether a statement opens a block that an end statement closes.
bool opens_block(const std::string & word, const std::string & s, size_t from, size_t to) {
    static const char * const kBlocks[] = {"if", "for", "macro", "call", "filter", "block", "raw", "generation"};
    for (const char * b : kBlocks) {
        if (word == b) return true;
    }
    // {% set x %} ... {% endset %} captures a block; {% set x = ... %} does not.
    return word == "set" && std::find(s.begin() + (long) from, s.begin() + (long) to, '=') == s.begin() + (long) to;
}

}  // namespace

int template_depth(const std::string & s) {
    int blocks = 0, deepest = 0;
    for (size_t at = s.find('{'); at != std::string::npos && at + 1 < s.size(); at = s.find('{', at + 1)) {
        const char kind = s[at + 1];
        if (kind != '%' && kind != '{') continue;
        const size_t close = s.find(kind == '%' ? "%}" : "}}", at + 2);
        const size_t end = close == std::string::npos ? s.size() : close;
        int brackets = 0, deepest_brackets = 0;
        for (size_t i = at + 2; i < end; ++i) {
            if (s[i] == '(' || s[i] == '[' || s[i] == '{') deepest_brackets = std::max(deepest_brackets, ++brackets);
            if (s[i] == ')' || s[i] == ']' || s[i] == '}') --brackets;
        }
        if (kind == '%') {
            const std::string word = keyword(s, at + 2, end);
            if (word.rfind("end", 0) == 0) {
                blocks = std::max(0, blocks - 1);
            } else if (opens_block(word, s, at + 2, end)) {
                ++blocks;
            }
        }
        deepest = std::max(deepest, blocks + deepest_brackets);
        if (close == std::string::npos) break;
        at = close;
    }
    return deepest;
}

void check_template_depth(const std::string & source, const std::string & origin) {
    const int depth = template_depth(source);
    if (depth > kMaxTemplateDepth) {
        throw std::runtime_error("chat template (" + origin + ") nests " + std::to_string(depth) +
                                 " levels deep, more than the " + std::to_string(kMaxTemplateDepth) +
                                 " its engine can take");
    }
}

}  // namespace llama_tp::server
