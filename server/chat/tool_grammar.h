#pragma once
// Adapting libcommon's tool-call grammar to the sampler: it begins with the
// template's generation prompt, which the sampler must be fed first, and it
// lets text come before the calls, which "required" should not allow.

#include <cstdint>
#include <string>
#include <vector>

namespace llama_tp {
class Tokenizer;
struct SamplingParams;
}  // namespace llama_tp

namespace llama_tp::server {

// When a lazy tool grammar starts constraining (libcommon's trigger kinds).
struct GrammarTrigger {
    enum class Kind {
        Word,         // this text appears in the output
        Pattern,      // this regular expression matches somewhere in the output
        PatternFull,  // this regular expression matches the whole output
        Token,        // this token is sampled
    };
    Kind kind = Kind::Word;
    std::string value;
    int32_t token = -1;  // Token: the id, when libcommon knew it
};

// Token ids of the template's preserved tokens (tool-call tags and the like)
// that are single tokens, sorted: the output spells them out as text even
// when they are special tokens.
std::vector<int32_t> preserved_token_ids(const Tokenizer & tokenizer, const std::vector<std::string> & preserved);

// Makes params' grammar lazy on these triggers. A trigger word that is one
// preserved token triggers on that token; other words become escaped
// patterns. Returns false (changing nothing) when no trigger is usable.
bool set_lazy_triggers(const Tokenizer & tokenizer, const std::vector<GrammarTrigger> & triggers,
                       const std::vector<int32_t> & preserved, SamplingParams & params);

// The grammar without the optional free text before the first call, so that a
// required call is the whole answer (OpenAI answers such calls without
// content). Unchanged when the grammar has no such part.
std::string calls_only_grammar(const std::string & grammar);

// Tokens that spell the generation prompt, to be accepted by the grammar
// before sampling. A leading space the tokenizer inserts is left out.
std::vector<int32_t> grammar_prefill_tokens(const Tokenizer & tokenizer, const std::string & generation_prompt);

}  // namespace llama_tp::server
