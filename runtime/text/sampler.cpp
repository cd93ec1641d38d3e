#include "runtime/text/sampler.h"

#include "runtime/error.h"
#include "runtime/text/tokenizer.h"

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

template <typename Add>
void add_truncation(SamplerStage stage, const SamplingParams & p, size_t keep, Add add) {
    switch (stage) {
        case SamplerStage::TopNSigma:
            if (p.top_n_sigma > 0.0f) add(llama_sampler_init_top_n_sigma(p.top_n_sigma));
            break;
        case SamplerStage::TopK:
            if (p.top_k > 0) add(llama_sampler_init_top_k(p.top_k));
            break;
        case SamplerStage::TypicalP:
            if (p.typical_p < 1.0f) add(llama_sampler_init_typical(p.typical_p, std::max<size_t>(keep, 1)));
            break;
        case SamplerStage::TopP:
            if (p.top_p < 1.0f) add(llama_sampler_init_top_p(p.top_p, std::max<size_t>(keep, 1)));
            break;
        case SamplerStage::MinP:
            if (p.min_p > 0.0f) add(llama_sampler_init_min_p(p.min_p, std::max<size_t>(keep, 1)));
            break;
        case SamplerStage::Xtc:
            if (p.xtc_probability > 0.0f) {
                add(llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, std::max<size_t>(keep, 1), p.seed));
            }
            break;
        case SamplerStage::Temperature:
            add(p.dynatemp_range > 0.0f
                    ? llama_sampler_init_temp_ext(p.temperature, p.dynatemp_range, p.dynatemp_exponent)
                    : llama_sampler_init_temp(p.temperature));
            break;
        default:
            break;
    }
}

}  // namespace

void Sampler::SamplerFree::operator()(llama_sampler * s) const {
    llama_sampler_free(s);
}

Sampler::Sampler(const Tokenizer & tokenizer, const SamplingParams & p, llama_sampler * constraint)
    : constraint_(constraint), n_vocab_(tokenizer.n_vocab()) {
    chain_ = llama_sampler_chain_init(llama_sampler_chain_default_params());
    std::vector<llama_logit_bias> bias;
    for (const auto & [token, value] : p.logit_bias) {
        if (token < 0 || token >= n_vocab_) {
            llama_sampler_free(chain_);
            throw Error("logit_bias names token " + std::to_string(token) + ", outside the vocabulary");
        }
        bias.push_back({token, value});
    }
    // The model's suppressed tokens (tokenizer.ggml.suppress_tokens) are never
    // sampled, whatever a request's own biases say, as upstream's sampler does.
    int32_t n_suppress = 0;
    const llama_token * suppress = llama_vocab_get_suppress_tokens(tokenizer.vocab(), &n_suppress);
    for (int32_t i = 0; i < n_suppress; ++i) bias.push_back({suppress[i], -INFINITY});
    if (!bias.empty()) {
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
    add_stages(tokenizer, p);
}

// Stages that change nothing with their settings are left out (same tokens,
// less work). Greedy (temperature <= 0, no Mirostat) keeps only the stages that
// move logits (penalties, DRY) before taking the most likely token.
void Sampler::add_stages(const Tokenizer & tokenizer, const SamplingParams & p) {
    const bool greedy = p.temperature <= 0.0f && p.mirostat == 0;
    greedy_ = greedy;
    const size_t keep = (size_t) std::max(0, p.min_keep);
    auto add = [this](llama_sampler * s) { llama_sampler_chain_add(chain_, s); };
    for (SamplerStage stage : p.order) {
        switch (stage) {
            case SamplerStage::Penalties:
                if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || p.repeat_penalty != 1.0f) {
                    add(llama_sampler_init_penalties(n_vocab_, p.penalty_last_n, p.repeat_penalty, p.frequency_penalty,
                                                     p.presence_penalty));
                }
                break;
            case SamplerStage::Dry:
                if (p.dry_multiplier > 0.0f) {
                    std::vector<const char *> breakers;
                    for (const std::string & b : p.dry_sequence_breakers) breakers.push_back(b.c_str());
                    add(llama_sampler_init_dry(tokenizer.vocab(), p.dry_multiplier, p.dry_base, p.dry_allowed_length,
                                               p.dry_penalty_last_n, breakers.data(), breakers.size()));
                }
                break;
            default:
                if (greedy || p.mirostat != 0) break;
                add_truncation(stage, p, keep, add);
                break;
        }
    }
    if (greedy) {
        add(llama_sampler_init_greedy());
    } else if (p.mirostat == 1) {
        add(llama_sampler_init_temp(p.temperature));
        add(llama_sampler_init_mirostat(n_vocab_, p.seed, p.mirostat_tau, p.mirostat_eta, 100));
    } else if (p.mirostat == 2) {
        add(llama_sampler_init_temp(p.temperature));
        add(llama_sampler_init_mirostat_v2(p.seed, p.mirostat_tau, p.mirostat_eta));
    } else {
        add(llama_sampler_init_dist(p.seed));
    }
}

Sampler::~Sampler() {
    llama_sampler_free(chain_);
}

int32_t Sampler::sample(const float * logits) {
    candidates_.resize(n_vocab_);
    for (int32_t i = 0; i < n_vocab_; ++i) candidates_[i] = llama_token_data{i, logits[i], 0.0f};
    llama_token_data_array arr{candidates_.data(), candidates_.size(), -1, false};
    if (constraint_) llama_sampler_apply(constraint_.get(), &arr);
    llama_sampler_apply(chain_, &arr);
    if (arr.selected < 0 || arr.selected >= (int64_t) arr.size) {
        throw Error("sampling found no admissible token (grammar dead end?)");
    }
    const int32_t token = arr.data[arr.selected].id;
    kept_ = arr.data;
    n_kept_ = arr.size;
    chosen_ = token;
    if (constraint_) llama_sampler_accept(constraint_.get(), token);
    llama_sampler_accept(chain_, token);
    return token;
}

std::vector<TokenProb> Sampler::chain_probs(int n) const {
    // Greedy takes the most likely token without a distribution; llama-server's
    // chain at temperature 0 leaves it alone, with all of the probability.
    if (greedy_) return n > 0 && chosen_ >= 0 ? std::vector<TokenProb>{{chosen_, 1.0f}} : std::vector<TokenProb>{};
    std::vector<TokenProb> out;
    for (size_t i = 0; i < n_kept_; ++i) {
        if (kept_[i].p > 0.0f) out.push_back({kept_[i].id, kept_[i].p});
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const TokenProb & a, const TokenProb & b) { return a.logprob > b.logprob; });
    if ((int) out.size() > std::max(0, n)) out.resize((size_t) std::max(0, n));
    return out;
}

float Sampler::chain_prob(int32_t token) const {
    if (greedy_) return token == chosen_ ? 1.0f : 0.0f;
    for (size_t i = 0; i < n_kept_; ++i) {
        if (kept_[i].id == token) return kept_[i].p;
    }
    return 0.0f;
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
