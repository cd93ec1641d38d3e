#include "plugin/sampler.h"

#include "plugin/error.h"
#include "plugin/tokenizer.h"

#include <algorithm>
#include <cmath>

#include "llama.h"

namespace llama_tp {

namespace {

float log_sum_exp(const float * x, int n) {
    const float m = *std::max_element(x, x + n);
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += std::exp((double) (x[i] - m));
    return m + (float) std::log(s);
}

llama_sampler * lazy_grammar(const Tokenizer & tokenizer, const SamplingParams & p) {
    if (p.grammar_trigger_patterns.empty() && p.grammar_trigger_tokens.empty()) {
        throw Error("a lazy grammar needs at least one trigger");
    }
    std::vector<const char *> patterns;
    for (const std::string & s : p.grammar_trigger_patterns) patterns.push_back(s.c_str());
    return llama_sampler_init_grammar_lazy_patterns(tokenizer.vocab(), p.grammar.c_str(), "root", patterns.data(),
                                                    patterns.size(), p.grammar_trigger_tokens.data(),
                                                    p.grammar_trigger_tokens.size());
}

}  // namespace

Sampler::Sampler(const Tokenizer & tokenizer, const SamplingParams & p) : n_vocab_(tokenizer.n_vocab()) {
    chain_ = llama_sampler_chain_init(llama_sampler_chain_default_params());
    if (!p.logit_bias.empty()) {
        std::vector<llama_logit_bias> bias;
        for (const auto & [token, value] : p.logit_bias) {
            if (token < 0 || token >= n_vocab_) {
                llama_sampler_free(chain_);
                throw Error("logit_bias names token " + std::to_string(token) + ", outside the vocabulary");
            }
            bias.push_back({token, value});
        }
        llama_sampler_chain_add(chain_, llama_sampler_init_logit_bias(n_vocab_, (int32_t) bias.size(), bias.data()));
    }
    if (!p.grammar.empty()) {
        llama_sampler * g = p.grammar_lazy ? lazy_grammar(tokenizer, p)
                                           : llama_sampler_init_grammar(tokenizer.vocab(), p.grammar.c_str(), "root");
        if (!g) {
            llama_sampler_free(chain_);
            throw Error("invalid grammar");
        }
        llama_sampler_chain_add(chain_, g);
    }
    const bool penalties = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || p.repeat_penalty != 1.0f;
    if (penalties) {
        llama_sampler_chain_add(chain_, llama_sampler_init_penalties(n_vocab_, p.penalty_last_n, p.repeat_penalty,
                                                                     p.frequency_penalty, p.presence_penalty));
    }
    if (p.temperature <= 0.0f) {
        llama_sampler_chain_add(chain_, llama_sampler_init_greedy());
        return;
    }
    if (p.top_k > 0) llama_sampler_chain_add(chain_, llama_sampler_init_top_k(p.top_k));
    if (p.top_p < 1.0f) llama_sampler_chain_add(chain_, llama_sampler_init_top_p(p.top_p, 1));
    if (p.min_p > 0.0f) llama_sampler_chain_add(chain_, llama_sampler_init_min_p(p.min_p, 1));
    llama_sampler_chain_add(chain_, llama_sampler_init_temp(p.temperature));
    llama_sampler_chain_add(chain_, llama_sampler_init_dist(p.seed));
}

Sampler::~Sampler() {
    llama_sampler_free(chain_);
}

int32_t Sampler::sample(const float * logits) {
    candidates_.resize(n_vocab_);
    for (int32_t i = 0; i < n_vocab_; ++i) candidates_[i] = llama_token_data{i, logits[i], 0.0f};
    llama_token_data_array arr{candidates_.data(), candidates_.size(), -1, false};
    llama_sampler_apply(chain_, &arr);
    if (arr.selected < 0 || arr.selected >= (int64_t) arr.size) {
        throw Error("sampling found no admissible token (grammar dead end?)");
    }
    const int32_t token = arr.data[arr.selected].id;
    llama_sampler_accept(chain_, token);
    return token;
}

float Sampler::logprob(const float * logits, int32_t token) const {
    return logits[token] - log_sum_exp(logits, n_vocab_);
}

void Sampler::accept(int32_t token) {
    llama_sampler_accept(chain_, token);
}

std::vector<TokenProb> Sampler::top_logprobs(const float * logits, int n) const {
    n = std::max(0, std::min(n, n_vocab_));
    std::vector<int32_t> ids(n_vocab_);
    for (int32_t i = 0; i < n_vocab_; ++i) ids[i] = i;
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    const float lse = log_sum_exp(logits, n_vocab_);
    std::vector<TokenProb> out;
    for (int i = 0; i < n; ++i) out.push_back({ids[i], logits[ids[i]] - lse});
    return out;
}

}  // namespace llama_tp
