#include "server/native_response.h"

#include "plugin/tokenizer.h"

namespace llama_tp::server {

namespace {

json bytes_of(const std::string & s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back((int) c);
    return b;
}

json token_json(const std::string & piece, int32_t id, float logprob) {
    return {{"id", id}, {"token", piece}, {"bytes", bytes_of(piece)}, {"logprob", logprob}};
}

json probabilities_json(const ResponseContext & ctx, const std::vector<TokenLogprob> & probs) {
    json out = json::array();
    for (const TokenLogprob & lp : probs) {
        json top = json::array();
        for (const TokenProb & t : lp.top) {
            top.push_back(token_json(ctx.tokenizer ? ctx.tokenizer->piece(t.token, false) : "", t.token, t.logprob));
        }
        json entry = token_json(lp.piece, lp.token, lp.logprob);
        entry["top_logprobs"] = top;
        out.push_back(entry);
    }
    return out;
}

}  // namespace

json native_settings(const GenerationRequest & gr, int32_t n_predict) {
    const SamplingParams & s = gr.sampling;
    return {{"n_predict", n_predict},
            {"max_tokens", n_predict},
            {"seed", s.seed},
            {"temperature", s.temperature},
            {"top_k", s.top_k},
            {"top_p", s.top_p},
            {"min_p", s.min_p},
            {"repeat_last_n", s.penalty_last_n},
            {"repeat_penalty", s.repeat_penalty},
            {"presence_penalty", s.presence_penalty},
            {"frequency_penalty", s.frequency_penalty},
            {"ignore_eos", gr.ignore_eos},
            {"stream", gr.stream},
            {"n_probs", gr.logprobs ? gr.top_logprobs : 0},
            {"stop", gr.stop},
            {"grammar", s.grammar},
            {"cache_prompt", gr.cache_prompt}};
}

json native_final(const ResponseContext & ctx, const std::string & content, const std::vector<int32_t> & tokens,
                  const std::vector<TokenLogprob> & probs, const TaskEvent & done) {
    json r = {{"index", 0},
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
              {"truncated", false},
              {"stop_type", done.stop_type},
              {"stopping_word", done.stopping_word},
              {"tokens_cached", done.n_cached},
              {"timings", timings_json(done)}};
    if (ctx.logprobs && !probs.empty()) r["completion_probabilities"] = probabilities_json(ctx, probs);
    return r;
}

json native_chunk(const ResponseContext & ctx, const TaskEvent & text) {
    json r = {{"index", 0},
              {"content", text.text},
              {"tokens", text.tokens},
              {"stop", false},
              {"id_slot", text.id_slot},
              {"tokens_predicted", text.n_completion},
              {"tokens_evaluated", text.n_prompt}};
    if (ctx.logprobs && !text.logprobs.empty()) r["completion_probabilities"] = probabilities_json(ctx, text.logprobs);
    return r;
}

}  // namespace llama_tp::server
