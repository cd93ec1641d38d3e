#pragma once
// Bounds on a grammar a request brings (given as GBNF, converted from a JSON
// schema, or made for its tools), checked before libllama's parser and
// sampler see it. The parser recurses into every group, so groups may nest
// only so deep. The sampler keeps one parse stack for every place the
// grammar can stand after the text so far and compares each new stack
// with all the others, so a step costs the square of their number: a
// rule of 16,000 alternatives holds every slot for seconds a token. A
// grammar that can stand at more than kMaxGrammarFanOut places after any
// one of its elements is refused.

#include <cstdint>
#include <string>

namespace llama_tp::server {

constexpr int kMaxGrammarDepth = 256;
constexpr int64_t kMaxGrammarFanOut = 1024;

struct GrammarShape {
    int depth = 0;        // deepest nesting of groups
    int64_t fan_out = 0;  // most places it can stand at once (at least 1)
};

// What the bounds read of a GBNF text. Text it cannot read (libllama's
// parser reports that) counts what it reads up to there.
GrammarShape grammar_shape(const std::string & gbnf);

// Throws a 400 ApiError naming `field` where a bound is exceeded.
void check_grammar(const std::string & gbnf, const std::string & field);

}  // namespace llama_tp::server
