#include "server/serving/prompt.h"

#include "runtime/engine.h"
#include "runtime/text/tokenizer.h"
#include "server/api/grammar_limits.h"
#include "server/http/http_access.h"
#include "server/log.h"
#include "server/chat/tool_grammar.h"
#include "server/serving/scheduler/scheduler.h"

#include "chat.h"
#include "json-schema-to-grammar.h"
#include "json.h"
#include "reasoning-budget.h"

#include <algorithm>
#include <climits>
#include <cstdint>

namespace llama_tp::server {

llama_sampler * ThinkingBudget::sampler(const Tokenizer & tok) const {
    if (tokens < 0) return nullptr;
    llama_sampler * s = common_reasoning_budget_init(tok.vocab(), {start}, ends, forced, tokens);
    for (int32_t t : prefill) llama_sampler_accept(s, t);
    return s;
}

namespace {

// A tag's tokens where it stands inside the text, after a newline: a
// vocabulary without a special token for it (SentencePiece's) tokenizes it
// alone with a word-start marker it does not have there.
std::vector<int32_t> tokens_in_text(const Tokenizer & tok, const std::string & tag) {
    const std::vector<int32_t> newline = tok.tokenize("\n", false, true);
    std::vector<int32_t> both = tok.tokenize("\n" + tag, false, true);
    if (both.size() > newline.size() && std::equal(newline.begin(), newline.end(), both.begin())) {
        both.erase(both.begin(), both.begin() + (std::ptrdiff_t) newline.size());
        return both;
    }
    return tok.tokenize(tag, false, true);
}

// The request's budget, else the server's; none where the template has no
// thinking tags, as upstream. A request that may end its thinking while it
// runs (reasoning_control) gets one without a limit.
ThinkingBudget thinking_budget(const ServerState & st, const GenerationRequest & gr, const ChatPrompt & cp) {
    ThinkingBudget b;
    const int32_t n = gr.reasoning_budget >= 0 ? gr.reasoning_budget : st.opts.reasoning_budget;
    if ((n < 0 && !gr.reasoning_control) || cp.thinking_start.empty() || cp.thinking_ends.empty()) return b;
    const Tokenizer & tok = st.engine->tokenizer();
    b.tokens = n < 0 ? INT32_MAX : n;
    b.start = tokens_in_text(tok, cp.thinking_start);
    for (const std::string & end : cp.thinking_ends) b.ends.push_back(tokens_in_text(tok, end));
    b.forced = tok.tokenize(gr.reasoning_budget_message.value_or(st.opts.reasoning_budget_message), false, true);
    b.forced.insert(b.forced.end(), b.ends.front().begin(), b.ends.front().end());
    b.prefill = grammar_prefill_tokens(tok, cp.syntax.generation_prompt);
    return b;
}

// Where in the prompt's tokens a user message opens: each place the tokens
// of one of the template's user delimiters begin.
std::vector<size_t> message_starts(const Tokenizer & tok, const std::vector<int32_t> & tokens,
                                   const std::vector<std::string> & delimiters) {
    std::vector<size_t> starts;
    for (const std::string & d : delimiters) {
        const std::vector<int32_t> run = tok.tokenize(d, false, true);
        if (run.empty()) continue;
        for (auto it = tokens.begin(); (it = std::search(it, tokens.end(), run.begin(), run.end())) != tokens.end();
             ++it) {
            starts.push_back((size_t) (it - tokens.begin()));
        }
    }
    std::sort(starts.begin(), starts.end());
    starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
    return starts;
}

// Tool calls: the template's grammar constrains sampling, from the start when
// a call is required, and from the first trigger (the start of a call) when
// the model may also answer in text (tool_choice "auto", a lazy grammar).
void use_tool_grammar(const ServerState & st, GenerationRequest & gr, const ChatPrompt & cp, PreparedPrompt & out) {
    const Tokenizer & tok = st.engine->tokenizer();
    out.preserved_tokens = preserved_token_ids(tok, cp.preserved_tokens);
    if (cp.tool_grammar.empty()) {
        if (gr.tools.choice == ToolChoice::Required) {
            throw bad_request("the chat template (" + st.chat->origin() +
                                  ") has no tool-call format, so a tool call cannot be required",
                              "tool_choice", "unsupported_value");
        }
        return;
    }
    if (cp.tool_grammar_lazy) {
        if (set_lazy_triggers(tok, cp.tool_grammar_triggers, out.preserved_tokens, gr.sampling)) {
            check_grammar(cp.tool_grammar, "tools");
            gr.sampling.grammar = cp.tool_grammar;
            SRV_DBG("lazy tool grammar, %zu trigger patterns, %zu trigger tokens:\n%s",
                    gr.sampling.grammar_trigger_patterns.size(), gr.sampling.grammar_trigger_tokens.size(),
                    gr.sampling.grammar.c_str());
        } else {
            SRV_DBG("lazy tool grammar without usable triggers: output is parsed only");
        }
        return;
    }
    gr.sampling.grammar =
        gr.tools.choice == ToolChoice::Required ? calls_only_grammar(cp.tool_grammar) : cp.tool_grammar;
    check_grammar(gr.sampling.grammar, "tools");
    SRV_DBG("tool grammar after generation prompt '%s':\n%s", cp.syntax.generation_prompt.c_str(),
            gr.sampling.grammar.c_str());
    out.grammar_prefill = grammar_prefill_tokens(tok, cp.syntax.generation_prompt);
}

// Fill-in-the-middle: [prefix token] prefix [suffix token] suffix [middle
// token] prompt (--spm-infill: suffix first), after the extra files (each
// behind the separator token where the vocabulary has one). The prefix keeps
// its end and the suffix its start when they would take more than half of a
// slot's context (3/4 of that to the prefix).
std::vector<int32_t> infill_prompt(const ServerState & st, const GenerationRequest & gr) {
    const Tokenizer & tok = st.engine->tokenizer();
    const Tokenizer::FimTokens fim = tok.fim();
    std::string missing;
    if (fim.prefix < 0) missing += " prefix token is missing.";
    if (fim.suffix < 0) missing += " suffix token is missing.";
    if (fim.middle < 0) missing += " middle token is missing.";
    if (!missing.empty()) throw not_supported("Infill is not supported by this model:" + missing);

    std::vector<int32_t> extra;
    if (fim.repo >= 0 && !gr.input_extra.empty()) {
        extra.push_back(fim.repo);
        const auto name = tok.tokenize("myproject\n", false, false);
        extra.insert(extra.end(), name.begin(), name.end());
    }
    for (const auto & [filename, text] : gr.input_extra) {
        if (fim.separator >= 0) extra.push_back(fim.separator);
        const auto t = tok.tokenize((fim.separator >= 0 ? filename + "\n" : "") + text, false, false);
        extra.insert(extra.end(), t.begin(), t.end());
    }
    std::vector<int32_t> prefix = tok.tokenize(gr.input_prefix, false, false);
    std::vector<int32_t> suffix = tok.tokenize(gr.input_suffix, false, false);
    const std::vector<int32_t> middle = tok.tokenize(gr.prompt_text, false, false);
    const size_t budget = (size_t) st.n_ctx_slot / 2;
    if (prefix.size() + suffix.size() > budget) {
        const size_t keep_suffix = std::min(suffix.size(), budget / 4);
        const size_t keep_prefix = std::min(prefix.size(), budget - keep_suffix);
        prefix.erase(prefix.begin(), prefix.end() - (ptrdiff_t) keep_prefix);
        suffix.resize(keep_suffix);
    }
    std::vector<int32_t> out;
    if (tok.add_bos() && tok.bos() >= 0) out.push_back(tok.bos());
    out.insert(out.end(), extra.begin(), extra.end());
    auto add = [&out](int32_t marker, const std::vector<int32_t> & part) {
        out.push_back(marker);
        out.insert(out.end(), part.begin(), part.end());
    };
    if (st.opts.spm_infill) {
        add(fim.suffix, suffix);
        add(fim.prefix, prefix);
    } else {
        add(fim.prefix, prefix);
        add(fim.suffix, suffix);
    }
    add(fim.middle, middle);
    return out;
}

// Every message and every tool takes the template at least one token: more
// of them than a slot holds tokens cannot fit, and are refused before the
// template renders them (which costs seconds for 100,000 messages).
void refuse_what_cannot_fit(const ServerState & st, const GenerationRequest & gr) {
    const auto refuse = [&](size_t n, const char * what, const char * param) {
        throw exceeds_context("the request has " + std::to_string(n) + " " + what +
                                  ", each at least one token, but the context of a slot holds " +
                                  std::to_string(st.n_ctx_slot),
                              param, (int32_t) std::min<size_t>(n, INT32_MAX), st.n_ctx_slot);
    };
    if (gr.messages.size() >= (size_t) st.n_ctx_slot) refuse(gr.messages.size(), "messages", "messages");
    if (gr.tools.tools.size() >= (size_t) st.n_ctx_slot) refuse(gr.tools.tools.size(), "tools", "tools");
}

}  // namespace

PreparedPrompt prepare_prompt(const ServerState & st, GenerationRequest & gr, std::vector<std::string> & stops) {
    const Tokenizer & tok = st.engine->tokenizer();
    PreparedPrompt out;
    if (gr.endpoint == Endpoint::Chat) {
        refuse_what_cannot_fit(st, gr);
        ChatPrompt cp = st.chat->apply(gr.messages, gr.tools, turn_options(st, gr));
        // The template's stops count as the request's, as llama-server: -r's then give way.
        if (!cp.stops.empty() && gr.stop_is_default) stops.clear();
        stops.insert(stops.end(), cp.stops.begin(), cp.stops.end());
        SRV_DBG("chat prompt: %s", cp.prompt.c_str());
        // deepseek-legacy keeps the thinking inline while streaming, as llama-server.
        cp.syntax.reasoning_in_content =
            gr.stream && cp.syntax.reasoning_format == COMMON_REASONING_FORMAT_DEEPSEEK_LEGACY;
        if (gr.tools.active() || cp.syntax.parse_reasoning) {
            out.output_parser = std::make_shared<ChatOutputParser>(cp.syntax);
        }
        if (gr.tools.active()) {
            use_tool_grammar(st, gr, cp, out);
        }
        out.thinking_budget = thinking_budget(st, gr, cp);
        out.tokens = tok.tokenize(cp.prompt, true, true);
        out.user_starts = message_starts(tok, out.tokens, cp.user_starts);
        return out;
    }
    if (gr.endpoint == Endpoint::Infill) {
        out.tokens = infill_prompt(st, gr);
        return out;
    }
    if (gr.prompt_is_tokens) {
        const int32_t n_vocab = tok.n_vocab();
        for (size_t i = 0; i < gr.prompt_tokens.size(); i++) {
            if (gr.prompt_tokens[i] >= n_vocab) {
                throw bad_request("'prompt' token " + std::to_string(gr.prompt_tokens[i]) + " at index " +
                                      std::to_string(i) + " is out of range (vocabulary size " +
                                      std::to_string(n_vocab) + ")",
                                  "prompt", "invalid_value");
            }
        }
        out.tokens = gr.prompt_tokens;
        return out;
    }
    out.tokens = tok.tokenize(gr.prompt_text, true, true);
    return out;
}

void resolve_logit_bias(const Tokenizer & tok, GenerationRequest & gr) {
    for (const auto & [text, bias] : gr.logit_bias_text) {
        for (int32_t id : tok.tokenize(text, false, false)) gr.sampling.logit_bias.emplace_back(id, bias);
    }
    for (const auto & [id, bias] : gr.sampling.logit_bias) {
        if (id >= tok.n_vocab()) {
            throw bad_request("'logit_bias' names token " + std::to_string(id) + ", outside the vocabulary of " +
                                  std::to_string(tok.n_vocab()),
                              "logit_bias", "invalid_value");
        }
    }
}

ChatTurnOptions turn_options(const ServerState & st, const GenerationRequest & gr) {
    ChatTurnOptions t;
    t.reasoning_format = gr.reasoning_format.empty() ? st.opts.reasoning_format
                                                     : (int) common_reasoning_format_from_name(gr.reasoning_format);
    t.enable_thinking = st.opts.enable_reasoning != 0;
    t.template_kwargs = st.opts.template_kwargs;
    t.pure_content = st.opts.skip_chat_parsing;
    for (const auto & [key, value] : gr.chat_template_kwargs.items()) t.template_kwargs[key] = value.dump();
    const auto thinking = t.template_kwargs.find("enable_thinking");
    if (thinking != t.template_kwargs.end()) t.enable_thinking = thinking->second == "true";
    if (gr.reasoning_effort == "none") {
        t.enable_thinking = false;
    } else if (!gr.reasoning_effort.empty()) {
        t.template_kwargs["reasoning_effort"] = json(gr.reasoning_effort).dump();
    }
    const bool last_is_assistant = !gr.messages.empty() && gr.messages.back().role == "assistant";
    t.continue_final_message = gr.continue_final_message == 1 ||
                               (gr.continue_final_message == -1 && st.opts.prefill_assistant && last_is_assistant);
    return t;
}

}  // namespace llama_tp::server
