#pragma once
// Token sampling on our own logits with libllama's sampler chain.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

struct llama_sampler;
struct llama_token_data;

namespace llama_tp {

class Tokenizer;

struct SamplingParams {
    float temperature = 0.8f;  // <= 0: greedy
    float top_p = 0.95f;
    float min_p = 0.05f;
    int32_t top_k = 40;
    uint32_t seed = 0xFFFFFFFF;  // 0xFFFFFFFF: random
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    float repeat_penalty = 1.0f;
    int32_t penalty_last_n = 64;
    std::string grammar;  // GBNF; empty: none
    // A lazy grammar is free until the output so far matches one of the
    // trigger patterns (regular expressions over the generated text; the
    // grammar then starts at the match, or at its first group) or a trigger
    // token is sampled; from there on it constrains every token.
    bool grammar_lazy = false;
    std::vector<std::string> grammar_trigger_patterns;
    std::vector<int32_t> grammar_trigger_tokens;
    std::vector<std::pair<int32_t, float>> logit_bias;  // added to a token's logit before anything else
};

struct TokenProb {
    int32_t token;
    float logprob;
};

class Sampler {
  public:
    // Throws llama_tp::Error on an invalid grammar.
    Sampler(const Tokenizer & tokenizer, const SamplingParams & params);
    ~Sampler();
    Sampler(const Sampler &) = delete;
    Sampler & operator=(const Sampler &) = delete;

    // Picks the next token from one row of logits (n_vocab floats) and
    // records it in the penalty/grammar state.
    int32_t sample(const float * logits);
    // Feeds a prompt token into the penalty state without sampling.
    void accept(int32_t token);

    // Log-probabilities (full softmax of the raw logits) of one token and of
    // the n most likely tokens; computed only when asked (a pass over the
    // whole vocabulary).
    float logprob(const float * logits, int32_t token) const;
    std::vector<TokenProb> top_logprobs(const float * logits, int n) const;

  private:
    llama_sampler * chain_ = nullptr;
    int32_t n_vocab_;
    std::vector<llama_token_data> candidates_;  // reused every sample()
};

}  // namespace llama_tp
