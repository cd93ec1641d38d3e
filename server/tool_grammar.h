#pragma once
// Adapting libcommon's tool-call grammar to the sampler: it begins with the
// template's generation prompt, which the sampler must be fed first, and it
// lets text come before the calls, which "required" should not allow.

#include <cstdint>
#include <string>
#include <vector>

namespace llama_tp {
class Tokenizer;
}

namespace llama_tp::server {

// The grammar without the optional free text before the first call, so that a
// required call is the whole answer (OpenAI answers such calls without
// content). Unchanged when the grammar has no such part.
std::string calls_only_grammar(const std::string & grammar);

// Tokens that spell the generation prompt, to be accepted by the grammar
// before sampling. A leading space the tokenizer inserts is left out.
std::vector<int32_t> grammar_prefill_tokens(const Tokenizer & tokenizer, const std::string & generation_prompt);

}  // namespace llama_tp::server
