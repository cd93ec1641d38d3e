#pragma once
// Token sampling on our own logits with libllama's sampler chain.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

struct llama_sampler;
struct llama_token_data;

namespace llama_tp {

class Tokenizer;

// The filters of a sampling chain; they run in the order SamplingParams::order
// gives (llama-server's default below), then a token is drawn.
enum class SamplerStage { Penalties, Dry, TopNSigma, TopK, TypicalP, TopP, MinP, Xtc, Temperature };

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
    float typical_p = 1.0f;       // 1: off
    float top_n_sigma = -1.0f;    // <= 0: off
    float dynatemp_range = 0.0f;  // 0: fixed temperature
    float dynatemp_exponent = 1.0f;
    float xtc_probability = 0.0f;  // 0: off
    float xtc_threshold = 0.1f;
    float dry_multiplier = 0.0f;  // 0: off
    float dry_base = 1.75f;
    int32_t dry_allowed_length = 2;
    int32_t dry_penalty_last_n = -1;  // -1: the whole context
    std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};
    int32_t mirostat = 0;  // 1 or 2: Mirostat (after the temperature) instead of the stages
    float mirostat_tau = 5.0f;
    float mirostat_eta = 0.1f;
    int32_t min_keep = 0;  // candidates the truncating stages always leave
    std::vector<SamplerStage> order = {SamplerStage::Penalties, SamplerStage::Dry,      SamplerStage::TopNSigma,
                                       SamplerStage::TopK,      SamplerStage::TypicalP, SamplerStage::TopP,
                                       SamplerStage::MinP,      SamplerStage::Xtc,      SamplerStage::Temperature};
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
    // Throws llama_tp::Error on an invalid grammar. constraint: nullptr, or a
    // sampler applied before everything else and fed every sampled token, not
    // the prompt's (libcommon's reasoning budget); the Sampler owns it.
    Sampler(const Tokenizer & tokenizer, const SamplingParams & params, llama_sampler * constraint = nullptr);
    ~Sampler();
    Sampler(const Sampler &) = delete;
    Sampler & operator=(const Sampler &) = delete;

    // Picks the next token from one row of logits (n_vocab floats) and
    // records it in the penalty/grammar state.
    int32_t sample(const float * logits);
    // Feeds a prompt token into the penalty state without sampling.
    void accept(int32_t token);
    // The constraint given at construction (nullptr: none), for its owner's
    // own calls between samples (libcommon's reasoning budget: force its end).
    llama_sampler * constraint() const { return constraint_.get(); }

    // Log-probabilities (full softmax of the raw logits) of one token and of
    // the n most likely tokens; computed only when asked (a pass over the
    // whole vocabulary).
    float logprob(const float * logits, int32_t token) const;
    std::vector<TokenProb> top_logprobs(const float * logits, int n) const;
    // Of the last sample(): the probabilities the chain's last stage gave the
    // candidates its filters kept (llama-server's post_sampling_probs), the n
    // most likely first, none of 0; greedy, the chosen token's 1. In TokenProb's
    // logprob field, as probabilities.
    std::vector<TokenProb> chain_probs(int n) const;
    // The chosen token's probability among them.
    float chain_prob(int32_t token) const;

  private:
    void add_stages(const Tokenizer & tokenizer, const SamplingParams & p);

    struct SamplerFree {
        void operator()(llama_sampler * s) const;
    };
    std::unique_ptr<llama_sampler, SamplerFree> constraint_;
    llama_sampler * chain_ = nullptr;
    int32_t n_vocab_;
    bool greedy_ = false;
    std::vector<llama_token_data> candidates_;  // reused every sample()
    // What the chain kept in the last sample(), valid until the next.
    const llama_token_data * kept_ = nullptr;
    size_t n_kept_ = 0;
    int32_t chosen_ = -1;
};

}  // namespace llama_tp
