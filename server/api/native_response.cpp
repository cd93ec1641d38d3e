#include "server/api/native_response.h"

#include "runtime/text/tokenizer.h"

#include <algorithm>

namespace llama_tp::server {

namespace {

json bytes_of(const std::string & s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back((int) c);
    return b;
}

// value: a log-probability, or with post_sampling_probs a probability.
json token_json(const ResponseContext & ctx, const std::string & piece, int32_t id, float value) {
    return {{"id", id},
            {"token", piece},
            {"bytes", bytes_of(piece)},
            {ctx.post_sampling_probs ? "prob" : "logprob", value}};
}

json probabilities_json(const ResponseContext & ctx, const std::vector<TokenLogprob> & probs) {
    json out = json::array();
    for (const TokenLogprob & lp : probs) {
        json top = json::array();
        for (const TokenProb & t : lp.top) {
            top.push_back(
                token_json(ctx, ctx.tokenizer ? ctx.tokenizer->piece(t.token, false) : "", t.token, t.logprob));
        }
        json entry = token_json(ctx, lp.piece, lp.token, lp.logprob);
        entry[ctx.post_sampling_probs ? "top_probs" : "top_logprobs"] = top;
        out.push_back(entry);
    }
    return out;
}

}  // namespace

const char * stage_name(SamplerStage stage) {
    switch (stage) {
        case SamplerStage::Penalties:
            return "penalties";
        case SamplerStage::Dry:
            return "dry";
        case SamplerStage::TopNSigma:
            return "top_n_sigma";
        case SamplerStage::TopK:
            return "top_k";
        case SamplerStage::TypicalP:
            return "typ_p";
        case SamplerStage::TopP:
            return "top_p";
        case SamplerStage::MinP:
            return "min_p";
        case SamplerStage::Xtc:
            return "xtc";
        case SamplerStage::Temperature:
            return "temperature";
    }
    return "";
}

json sampling_settings_json(const SamplingParams & s, int32_t n_predict, bool ignore_eos) {
    json order = json::array();
    for (SamplerStage st : s.order) order.push_back(stage_name(st));
    return {{"n_predict", n_predict},
            {"max_tokens", n_predict},
            {"seed", s.seed},
            {"temperature", s.temperature},
            {"dynatemp_range", s.dynatemp_range},
            {"dynatemp_exponent", s.dynatemp_exponent},
            {"top_k", s.top_k},
            {"top_p", s.top_p},
            {"min_p", s.min_p},
            {"top_n_sigma", s.top_n_sigma},
            {"xtc_probability", s.xtc_probability},
            {"xtc_threshold", s.xtc_threshold},
            {"typical_p", s.typical_p},
            {"repeat_last_n", s.penalty_last_n},
            {"repeat_penalty", s.repeat_penalty},
            {"presence_penalty", s.presence_penalty},
            {"frequency_penalty", s.frequency_penalty},
            {"dry_multiplier", s.dry_multiplier},
            {"dry_base", s.dry_base},
            {"dry_allowed_length", s.dry_allowed_length},
            {"dry_penalty_last_n", s.dry_penalty_last_n},
            {"dry_sequence_breakers", s.dry_sequence_breakers},
            {"mirostat", s.mirostat},
            {"mirostat_tau", s.mirostat_tau},
            {"mirostat_eta", s.mirostat_eta},
            {"min_keep", s.min_keep},
            {"ignore_eos", ignore_eos},
            {"samplers", order},
            {"grammar", s.grammar},
            // What llama-server reports for a raw completion: no adaptive-p
            // sampler, no backend sampling, no chat parsing of the output.
            {"adaptive_target", -1.0f},
            {"adaptive_decay", 0.9f},
            {"backend_sampling", false},
            {"chat_format", "Content-only"},
            {"reasoning_format", "none"},
            {"reasoning_in_content", false},
            {"generation_prompt", ""},
            // A request's own below (native_settings); these are the defaults.
            {"stream", false},
            {"n_probs", 0},
            {"n_keep", 0},
            {"n_discard", 0},
            {"timings_per_token", false},
            {"post_sampling_probs", false},
            {"lora", json::array()}};
}

json native_settings(const GenerationRequest & gr, int32_t n_predict, int32_t n_keep) {
    json j = sampling_settings_json(gr.sampling, n_predict, gr.ignore_eos);
    j["stream"] = gr.stream;
    j["n_probs"] = gr.logprobs ? gr.top_logprobs : 0;
    j["stop"] = gr.stop;
    j["cache_prompt"] = gr.cache_prompt;
    j["n_keep"] = n_keep;
    j["n_discard"] = gr.n_discard;
    j["timings_per_token"] = gr.timings_per_token;
    j["post_sampling_probs"] = gr.post_sampling_probs;
    json bias = json::array();
    for (const auto & [token, b] : gr.sampling.logit_bias) bias.push_back({{"bias", b}, {"token", token}});
    j["logit_bias"] = bias;
    j["grammar_lazy"] = gr.sampling.grammar_lazy;
    j["grammar_triggers"] = json::array();
    j["preserved_tokens"] = json::array();
    // The request's own adapter list, as llama-server echoes it (validated by then).
    json lora = json::array();
    if (gr.lora && gr.lora->is_array()) {
        for (const json & e : *gr.lora) lora.push_back({{"id", e.value("id", -1)}, {"scale", e.value("scale", 0.0)}});
    }
    j["lora"] = lora;
    return j;
}

json native_final(const ResponseContext & ctx, const std::string & content, const std::vector<int32_t> & tokens,
                  const std::vector<TokenLogprob> & probs, const TaskEvent & done) {
    json r = {{"index", ctx.index},
              {"content", content},
              {"tokens", tokens},
              {"id_slot", done.id_slot},
              {"stop", true},
              {"model", ctx.model},
              {"tokens_predicted", done.n_completion},
              {"tokens_evaluated", done.n_prompt},
              {"generation_settings", ctx.settings},
              {"prompt", ctx.prompt},
              {"has_new_line", content.find('\n') != std::string::npos},
              {"truncated", done.truncated},
              {"stop_type", done.stop_type},
              {"stopping_word", done.stopping_word},
              {"tokens_cached", done.n_cached},
              {"timings", timings_json(done)}};
    if (ctx.logprobs && !probs.empty()) r["completion_probabilities"] = probabilities_json(ctx, probs);
    if (ctx.response_fields.empty()) return r;
    // Only the fields asked for, each under its path ("generation_settings/n_predict").
    json picked = json::object();
    for (const std::string & path : ctx.response_fields) {
        const json * at = &r;
        size_t from = 0;
        bool found = true;
        while (found && from <= path.size()) {
            const size_t slash = std::min(path.find('/', from), path.size());
            const std::string key = path.substr(from, slash - from);
            found = at->is_object() && at->contains(key);
            if (found) at = &(*at)[key];
            from = slash + 1;
        }
        if (found) picked[path] = *at;
    }
    return picked;
}

json native_chunk(const ResponseContext & ctx, const TaskEvent & text) {
    json r = {{"index", ctx.index},
              {"content", text.text},
              {"tokens", text.tokens},
              {"stop", false},
              {"id_slot", text.id_slot},
              {"tokens_predicted", text.n_completion},
              {"tokens_evaluated", text.n_prompt}};
    if (ctx.logprobs && !text.logprobs.empty()) r["completion_probabilities"] = probabilities_json(ctx, text.logprobs);
    if (text.has_timings) r["timings"] = timings_json(text);
    return r;
}

}  // namespace llama_tp::server
