#include "server/http/http_routes.h"

#include "server/http/http_access.h"

#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "server/chat/chat_format.h"
#include "server/api/embeddings.h"
#include "server/api/rerank.h"
#include "server/log.h"
#include "server/api/anthropic_messages.h"
#include "server/serving/lora_adapters.h"
#include "server/api/native_response.h"
#include "server/api/openai_responses.h"
#include "server/api/reply_shape.h"
#include "server/api/request.h"
#include "server/api/response.h"
#include "server/serving/scheduler.h"
#include "server/serving/slot_file.h"
#include "server/chat/chat_output_parser.h"
#include "server/chat/tool_grammar.h"

#include <cpp-httplib/httplib.h>

#include "chat.h"
#include "json-schema-to-grammar.h"
#include "json.h"
#include "reasoning-budget.h"

#include <chrono>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>

namespace llama_tp::server {

namespace {

using httplib::Request;
using httplib::Response;

// The prompt, and when the model may call tools, how to constrain and read its
// output.
// libcommon's reasoning budget for a chat turn: after `tokens` tokens inside
// the template's thinking block it forces the end tag (after a message).
struct ThinkingBudget {
    int32_t tokens = -1;  // -1: none
    std::vector<int32_t> start;
    std::vector<std::vector<int32_t>> ends;
    std::vector<int32_t> forced;
    std::vector<int32_t> prefill;  // the generation prompt, which may open the block

    // A new budget sampler for one request (nullptr: none).
    llama_sampler * sampler(const Tokenizer & tok) const {
        if (tokens < 0) return nullptr;
        llama_sampler * s = common_reasoning_budget_init(tok.vocab(), {start}, ends, forced, tokens);
        for (int32_t t : prefill) llama_sampler_accept(s, t);
        return s;
    }
};

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

struct PreparedPrompt {
    std::vector<int32_t> tokens;
    ThinkingBudget thinking_budget;
    std::vector<int32_t> grammar_prefill;   // tokens the tool grammar must see first
    std::vector<int32_t> preserved_tokens;  // sorted; shown as text in the output
    std::shared_ptr<ChatOutputParser> output_parser;
};

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

// The server's defaults (--reasoning-format, --reasoning, --chat-template-kwargs,
// --prefill-assistant, --skip-chat-parsing) with what the request says over them.
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

PreparedPrompt prepare_prompt(const ServerState & st, GenerationRequest & gr, std::vector<std::string> & stops) {
    const Tokenizer & tok = st.engine->tokenizer();
    PreparedPrompt out;
    if (gr.endpoint == Endpoint::Chat) {
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

// Text entries of logit_bias become their tokens; every id must be in the vocabulary.
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

// Validates what needs the model, and builds the scheduler task.
std::unique_ptr<Task> make_task(ServerState & st, GenerationRequest & gr,
                                std::shared_ptr<ChatOutputParser> & output_parser) {
    auto task = std::make_unique<Task>();
    task->id = st.next_task_id++;
    task->stop = gr.stop;
    PreparedPrompt prepared = prepare_prompt(st, gr, task->stop);
    task->prompt = std::move(prepared.tokens);
    output_parser = std::move(prepared.output_parser);
    task->preserved_tokens = std::move(prepared.preserved_tokens);
    task->special_as_text = st.opts.special;

    const char * prompt_param = gr.endpoint == Endpoint::Chat ? "messages" : "prompt";
    const int32_t n_prompt = (int32_t) task->prompt.size();
    if (n_prompt == 0) {
        throw bad_request("the prompt is empty", prompt_param, "invalid_value");
    }
    if (n_prompt >= st.n_ctx_slot) {
        throw exceeds_context("the prompt is " + std::to_string(n_prompt) +
                                  " tokens, but the context of a slot holds " + std::to_string(st.n_ctx_slot) +
                                  " (prompt and completion together)",
                              prompt_param, n_prompt, st.n_ctx_slot);
    }

    int64_t n_predict = gr.max_tokens >= 0 ? gr.max_tokens : (st.opts.n_predict >= 0 ? st.opts.n_predict : INT_MAX);
    // Without a context shift generation ends where the slot's context does.
    task->context_shift = st.opts.context_shift;
    task->n_keep = gr.n_keep >= -1 ? gr.n_keep : st.opts.n_keep;
    task->n_discard = gr.n_discard;
    if (!task->context_shift && n_predict > st.n_ctx_slot - n_prompt) {
        n_predict = st.n_ctx_slot - n_prompt;
        task->context_ends_it = true;
    }
    task->n_predict = (int32_t) n_predict;
    task->ignore_eos = gr.ignore_eos;
    task->cache_prompt = gr.cache_prompt;
    task->n_cache_reuse = gr.n_cache_reuse;
    task->n_top_logprobs = gr.logprobs ? gr.top_logprobs : -1;
    task->return_tokens = gr.return_tokens;
    if (gr.id_slot >= st.scheduler->n_slots()) {
        throw bad_request("'id_slot' " + std::to_string(gr.id_slot) + " is not a slot (0 to " +
                              std::to_string(st.scheduler->n_slots() - 1) + ")",
                          "id_slot", "invalid_value");
    }
    task->id_slot = gr.id_slot;
    task->t_max_predict_ms = gr.t_max_predict_ms;
    task->timings_per_token = gr.timings_per_token && gr.stream;
    task->return_progress = gr.return_progress && gr.stream;
    // As llama-server: an empty list, like none, takes the global scales.
    task->lora =
        gr.lora && !(gr.lora->is_array() && gr.lora->empty()) ? st.loras->parse(*gr.lora, "lora") : st.loras->scales();

    if (!gr.json_schema.empty()) {
        try {
            gr.sampling.grammar = json_schema_to_grammar(common_json::parse(gr.json_schema));
        } catch (const std::exception & e) {
            throw bad_request(std::string("'response_format' schema is not supported: ") + e.what(), "response_format",
                              "invalid_value");
        }
    }
    resolve_logit_bias(st.engine->tokenizer(), gr);
    // -1: the whole context, which the sampler takes as a count.
    if (gr.sampling.penalty_last_n < 0) gr.sampling.penalty_last_n = st.n_ctx_slot;
    if (gr.sampling.dry_penalty_last_n < 0) gr.sampling.dry_penalty_last_n = st.n_ctx_slot;
    try {
        task->sampler = std::make_unique<Sampler>(st.engine->tokenizer(), gr.sampling,
                                                  prepared.thinking_budget.sampler(st.engine->tokenizer()));
    } catch (const std::exception & e) {
        throw bad_request(std::string("invalid sampling parameters: ") + e.what(),
                          gr.sampling.grammar.empty() ? "" : "grammar", "invalid_value");
    }
    try {
        for (int32_t t : prepared.grammar_prefill) {
            task->sampler->accept(t);
        }
    } catch (const std::exception & e) {
        throw ApiError(500, std::string("the tool-call grammar rejects the template's generation prompt: ") + e.what(),
                       "", "internal_error");
    }
    task->settings = std::make_shared<const std::string>(dump_json(native_settings(gr, task->n_predict)));
    return task;
}

ApiError event_error(const TaskEvent & e) {
    return ApiError(e.status, e.message, "", e.status == 503 ? "unavailable" : "");
}

// One answer of a request: its task's channel and how it is written.
struct Choice {
    std::shared_ptr<TaskChannel> channel;
    std::unique_ptr<ReplyShape> shape;
};

void cancel_all(std::vector<Choice> & choices) {
    for (Choice & c : choices) c.channel->cancel();
}

// The counts of all choices' last events, for the usage of the whole answer.
TaskEvent total_of(const std::vector<TaskEvent> & dones) {
    TaskEvent t = dones.front();
    for (size_t i = 1; i < dones.size(); ++i) t.n_completion += dones[i].n_completion;
    return t;
}

void respond_blocking(const Request & req, Response & res, std::vector<Choice> & choices) {
    std::vector<json> wholes;
    std::vector<TaskEvent> dones;
    for (Choice & c : choices) {
        GeneratedText out;
        std::vector<TaskEvent> events;
        auto last_check = std::chrono::steady_clock::now();
        bool done = false;
        while (!done) {
            events.clear();
            const bool got = c.channel->pop_all(events, std::chrono::milliseconds(100));
            // Events may keep coming without pause: look at the socket on a clock.
            const auto now = std::chrono::steady_clock::now();
            if (!got || now - last_check > std::chrono::milliseconds(100)) {
                last_check = now;
                if (req.is_connection_closed()) {
                    cancel_all(choices);
                    return;
                }
            }
            for (auto & e : events) {
                switch (e.kind) {
                    case TaskEvent::Kind::Text:
                        out.text += e.text;
                        for (auto & lp : e.logprobs) out.logprobs.push_back(std::move(lp));
                        out.tokens.insert(out.tokens.end(), e.tokens.begin(), e.tokens.end());
                        break;
                    case TaskEvent::Kind::Done:
                        wholes.push_back(c.shape->whole(out, e));
                        dones.push_back(e);
                        done = true;
                        break;
                    case TaskEvent::Kind::Error:
                        cancel_all(choices);
                        throw event_error(e);
                    case TaskEvent::Kind::Progress:
                        break;
                }
            }
        }
    }
    send_json(res, choices.front().shape->merge(std::move(wholes), total_of(dones)));
}

struct StreamState {
    std::vector<Choice> choices;
    std::vector<bool> done;
    std::vector<TaskEvent> dones;
    std::function<bool()> connection_closed;
    bool started = false;
    bool finished = false;
    // Clients such as undici drop a stream that stays silent (a long prompt
    // computing): an SSE comment after this long keeps it open, as llama-server.
    std::chrono::seconds ping_interval{0};
    std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

void respond_streaming(const Request & req, Response & res, std::vector<Choice> choices, int32_t ping_interval_s) {
    auto s = std::make_shared<StreamState>();
    s->choices = std::move(choices);
    s->ping_interval = std::chrono::seconds(std::max(0, ping_interval_s));
    s->done.assign(s->choices.size(), false);
    s->connection_closed = req.is_connection_closed;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [s](size_t, httplib::DataSink & sink) -> bool {
            auto write = [&sink, &s](const std::string & data) {
                if (data.empty()) return true;
                s->last_write = std::chrono::steady_clock::now();
                return sink.write(data.data(), data.size());
            };
            auto fail = [&s] {
                cancel_all(s->choices);
                return false;
            };
            if (!s->started) {
                s->started = true;
                for (Choice & c : s->choices) {
                    if (!write(c.shape->stream_start())) return fail();
                }
            }
            const auto wait = std::chrono::milliseconds(s->choices.size() > 1 ? 10 : 100);
            bool any = false;
            for (size_t i = 0; i < s->choices.size(); ++i) {
                if (s->done[i]) continue;
                std::vector<TaskEvent> events;
                if (!s->choices[i].channel->pop_all(events, wait)) continue;
                any = true;
                ReplyShape & shape = *s->choices[i].shape;
                for (auto & e : events) {
                    bool ok = true;
                    switch (e.kind) {
                        case TaskEvent::Kind::Text:
                            ok = write(shape.stream_text(e));
                            break;
                        case TaskEvent::Kind::Progress:
                            ok = write(shape.stream_progress(e));
                            break;
                        case TaskEvent::Kind::Done:
                            ok = write(shape.stream_done(e));
                            s->done[i] = true;
                            s->dones.push_back(e);
                            break;
                        case TaskEvent::Kind::Error:
                            write(shape.stream_error(event_error(e)));
                            s->finished = true;
                            cancel_all(s->choices);
                            sink.done();
                            return true;
                    }
                    if (!ok) return fail();
                    if (s->done[i]) break;
                }
            }
            if (s->dones.size() == s->choices.size()) {
                s->finished = true;
                if (!write(s->choices.front().shape->stream_end(total_of(s->dones)))) return fail();
                sink.done();
                return true;
            }
            if (!any && s->connection_closed()) return fail();
            const auto silent = std::chrono::steady_clock::now() - s->last_write;
            if (!any && s->ping_interval.count() > 0 && silent >= s->ping_interval && !write(":\n\n")) return fail();
            return true;  // httplib calls again
        },
        [s](bool) {
            if (!s->finished) cancel_all(s->choices);  // client went away mid-stream
        });
}

// Every prompt a task of its own, decoded in whichever slots are free and
// pooled; their Done events in the prompts' order, or none when the client
// went away. `field` names the body's field for a prompt that does not fit.
std::vector<TaskEvent> run_pooled(ServerState & st, const Request & req,
                                  const std::vector<std::vector<int32_t>> & prompts, const char * field) {
    std::vector<std::shared_ptr<TaskChannel>> channels;
    std::vector<std::unique_ptr<Task>> tasks;
    for (const auto & prompt : prompts) {
        if ((int32_t) prompt.size() > st.n_ctx_slot) {
            throw exceeds_context("an input is " + std::to_string(prompt.size()) + " tokens, but a slot holds " +
                                      std::to_string(st.n_ctx_slot),
                                  field, (int32_t) prompt.size(), st.n_ctx_slot);
        }
        auto task = std::make_unique<Task>();
        task->id = st.next_task_id++;
        task->prompt = prompt;
        task->embedding = true;
        task->pooling = st.opts.pooling;
        task->cache_prompt = false;  // every token's hidden state is needed
        task->lora = st.loras->scales();
        channels.push_back(task->channel);
        tasks.push_back(std::move(task));
    }
    try {
        for (auto & t : tasks) st.scheduler->submit(std::move(t));
    } catch (const QueueFullError & e) {
        for (auto & c : channels) c->cancel();
        throw ApiError(503, e.what(), "", "server_overloaded", "server_error");
    }
    std::vector<TaskEvent> dones;
    for (auto & c : channels) {
        std::vector<TaskEvent> events;
        bool done = false;
        while (!done) {
            events.clear();
            if (!c->pop_all(events, std::chrono::milliseconds(100))) {
                if (req.is_connection_closed()) {
                    for (auto & other : channels) other->cancel();
                    return {};
                }
                continue;
            }
            for (auto & e : events) {
                if (e.kind == TaskEvent::Kind::Error) {
                    for (auto & other : channels) other->cancel();
                    throw event_error(e);
                }
                if (e.kind != TaskEvent::Kind::Done) continue;
                dones.push_back(std::move(e));
                done = true;
            }
        }
    }
    return dones;
}

// /v1/embeddings (oai) and /embedding, /embeddings.
void handle_embeddings(ServerState & st, const Request & req, Response & res, bool oai) {
    if (!st.opts.embeddings || st.opts.pooling == Pooling::Rank) {
        throw not_supported(
            "This server does not support embeddings. Start it with `--embeddings` and without `--rerank`");
    }
    const json body = parse_json_body(req.body);
    if (oai && st.opts.pooling == Pooling::None) {
        throw bad_request("Pooling type 'none' is not OAI compatible. Please use a different pooling type", "", "");
    }
    const std::string format = body.value("encoding_format", "float");
    if (format != "float" && format != "base64") {
        throw bad_request("'encoding_format' must be float or base64", "encoding_format", "invalid_value");
    }
    int norm = st.opts.embd_normalize;
    if (body.contains("embd_normalize")) {
        if (!body["embd_normalize"].is_number_integer()) {
            throw bad_request("'embd_normalize' must be an integer", "embd_normalize", "invalid_type");
        }
        norm = body["embd_normalize"].get<int>();
    }
    const char * field = oai || !body.contains("content") ? "input" : "content";
    const auto inputs = embedding_inputs(body, field, st.engine->tokenizer());
    std::vector<TaskEvent> dones = run_pooled(st, req, inputs, field);
    if (dones.empty()) return;  // the client went away
    const int32_t n_embd = st.engine->info().n_embd;
    std::vector<EmbeddingResult> results;
    for (TaskEvent & e : dones) {
        EmbeddingResult r{std::move(e.embedding), e.embedding_rows, e.n_prompt};
        normalize_rows(r.rows, n_embd, norm);
        results.push_back(std::move(r));
    }
    const std::string model = body.value("model", st.model_name);
    send_json(res, oai ? openai_embeddings_json(results, n_embd, model, format == "base64")
                       : native_embeddings_json(results, n_embd));
}

// /rerank and its aliases: each document scored with the query.
void handle_rerank(ServerState & st, const Request & req, Response & res) {
    if (!st.opts.embeddings || st.opts.pooling != Pooling::Rank) {
        throw not_supported("This server does not support reranking. Start it with `--rerank`");
    }
    const RerankRequest r = parse_rerank_request(parse_json_body(req.body));
    std::vector<std::vector<int32_t>> prompts;
    for (const std::string & d : r.documents) prompts.push_back(rerank_prompt(st.engine->tokenizer(), r.query, d));
    const std::vector<TaskEvent> dones = run_pooled(st, req, prompts, r.tei ? "texts" : "documents");
    if (dones.empty()) return;
    std::vector<float> scores;
    std::vector<int32_t> n_tokens;
    for (const TaskEvent & e : dones) {
        scores.push_back(e.embedding.at(0));  // the first output: "yes" for Qwen3's rerankers
        n_tokens.push_back(e.n_prompt);
    }
    send_json(res, rerank_json(r, st.model_name, scores, n_tokens));
}

// The tokens a chat request's prompt takes, as a completion would count them.
size_t prompt_tokens(ServerState & st, const json & chat_body) {
    GenerationRequest gr = parse_generation_request(Endpoint::Chat, chat_body, st.opts.requests);
    std::vector<std::string> stops;
    return prepare_prompt(st, gr, stops).tokens.size();
}

// The API shape a route answers in.
enum class Shape { OpenAi, Native, Anthropic, Responses };

std::unique_ptr<ReplyShape> make_shape(Shape kind, const ResponseContext & ctx, const GenerationRequest & gr,
                                       std::shared_ptr<ChatOutputParser> parser, int32_t n_prompt) {
    switch (kind) {
        case Shape::Native:
            return native_reply(ctx);
        case Shape::Anthropic:
            return anthropic_reply(ctx, std::move(parser), n_prompt);
        case Shape::Responses:
            return responses_reply(ctx, std::move(parser), n_prompt);
        case Shape::OpenAi:
        default:
            return openai_reply(ctx, std::move(parser), gr.include_usage);
    }
}

// The body as the request parser reads it: the chat request another API's
// body means.
json request_body(Shape shape, const Request & req) {
    json body = parse_json_body(req.body);
    if (shape == Shape::Anthropic) return openai_chat_body(body);
    if (shape == Shape::Responses) return chat_body_from_responses(body);
    return body;
}

void handle_generation(ServerState & st, Endpoint endpoint, const Request & req, Response & res,
                       Shape shape_kind = Shape::OpenAi) {
    if (st.opts.embeddings) {
        throw not_supported("This server does not support completions. Start it without `--embeddings`");
    }
    const json body = request_body(shape_kind, req);
    const GenerationRequest request = parse_generation_request(endpoint, body, st.opts.requests);
    const int32_t n = request.n_choices;
    if (n > 1 && (shape_kind == Shape::Anthropic || shape_kind == Shape::Responses)) {
        throw bad_request("'n' is not a field of this API", "n");
    }
    if (n > st.scheduler->n_slots()) {
        throw bad_request("'n' is " + std::to_string(n) + ", more than the server's " +
                              std::to_string(st.scheduler->n_slots()) + " slots",
                          "n", "invalid_value");
    }
    std::vector<Choice> choices;
    std::vector<std::unique_ptr<Task>> tasks;
    ResponseContext first;
    for (int32_t i = 0; i < n; ++i) {
        GenerationRequest gr = request;
        // A fixed seed gives each choice its own.
        if (gr.sampling.seed != 0xFFFFFFFFu) gr.sampling.seed += (uint32_t) i;
        std::shared_ptr<ChatOutputParser> parser;
        std::unique_ptr<Task> task = make_task(st, gr, parser);
        ResponseContext ctx = i == 0 ? ResponseContext::make(endpoint, gr.model.empty() ? st.model_name : gr.model,
                                                             gr.logprobs, &st.engine->tokenizer())
                                     : first;
        ctx.index = i;
        task->completion_id = ctx.id;
        task->reasoning_control = gr.reasoning_control;
        if (shape_kind == Shape::Native) {
            ctx.prompt = gr.prompt_is_tokens || endpoint == Endpoint::Infill
                             ? st.engine->tokenizer().detokenize(task->prompt, true)
                             : gr.prompt_text;
            ctx.settings = native_settings(gr, task->n_predict);
            ctx.settings["speculative.types"] = st.speculative_types;
            ctx.response_fields = gr.response_fields;
        }
        if (i == 0) first = ctx;
        choices.push_back({task->channel, make_shape(shape_kind, ctx, gr, parser, (int32_t) task->prompt.size())});
        tasks.push_back(std::move(task));
    }
    try {
        for (auto & task : tasks) st.scheduler->submit(std::move(task));
    } catch (const QueueFullError & e) {
        cancel_all(choices);
        throw ApiError(503, e.what(), "", "server_overloaded", "server_error");
    }
    if (request.stream) {
        respond_streaming(req, res, std::move(choices), request.sse_ping_interval_s);
    } else {
        respond_blocking(req, res, choices);
    }
}

// Known routes by name; anything else is "other", so that scanning a server
// for paths cannot grow the number of series without bound.
std::string metrics_endpoint(const std::string & path) {
    static const char * const known[] = {
        "/v1/messages",    "/v1/responses", "/health",     "/v1/health", "/v1/models",           "/models",
        "/v1/completions", "/completions",  "/completion", "/infill",    "/v1/chat/completions", "/chat/completions",
        "/tokenize",       "/detokenize",   "/props",      "/metrics"};
    for (const char * k : known) {
        if (path == k) {
            return path;
        }
    }
    return "other";
}

bool is_valid_utf8(const std::string & s) {
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = (unsigned char) s[i];
        const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k) {
            if ((((unsigned char) s[i + k]) >> 6) != 0x2) return false;
        }
        i += n;
    }
    return true;
}

// A token's text, or its bytes where it is not whole UTF-8 (as llama-server).
json piece_json(const std::string & piece) {
    if (is_valid_utf8(piece)) return piece;
    json bytes = json::array();
    for (unsigned char c : piece) bytes.push_back((int) c);
    return bytes;
}

// The text that stands for an image or audio clip in a prompt; multimodal
// input is not served here, but clients read it from /props.
std::string media_marker() {
    const char * pinned = std::getenv("LLAMA_MEDIA_MARKER");  // llama-server's variable
    return pinned && *pinned ? pinned : "<__media__>";
}

json props_json(const ServerState & st) {
    const auto stats = st.scheduler->stats();
    const Tokenizer & tok = st.engine->tokenizer();
    auto token_text = [&tok](int32_t id) { return id >= 0 ? tok.piece(id, true) : std::string(); };
    json params = sampling_settings_json(st.opts.requests.sampling, st.opts.n_predict, st.opts.requests.ignore_eos);
    params["speculative.types"] = st.speculative_types;
    json props = {{"default_generation_settings", {{"n_ctx", st.n_ctx_slot}, {"params", params}}},
                  {"total_slots", st.scheduler->n_slots()},
                  {"model_alias", st.model_name},
                  {"model_path", st.opts.engine.model_path},
                  {"model_ftype", st.engine->info().weight_type},
                  {"modalities", {{"vision", false}, {"video", false}, {"audio", false}}},
                  {"media_marker", media_marker()},
                  {"endpoint_slots", st.opts.endpoint_slots},
                  {"endpoint_props", st.opts.endpoint_props},
                  {"endpoint_metrics", st.opts.endpoint_metrics},
                  {"ui", false},  // no web UI here
                  {"ui_settings", json::object()},
                  {"chat_template", st.chat->source()},
                  {"chat_template_caps", st.chat->capabilities()},
                  {"chat_template_origin", st.chat->origin()},
                  {"bos_token", token_text(tok.bos())},
                  {"eos_token", token_text(tok.eos())},
                  {"build_info", "llama-tp"},
                  {"is_sleeping", st.scheduler->asleep()},
                  {"cors_proxy_enabled", false},  // /cors-proxy answers 403 here
                  // llama-tp's own
                  {"busy_slots", stats.busy},
                  {"queued_requests", stats.queued},
                  {"n_ctx", st.n_ctx},
                  {"n_ctx_slot", st.n_ctx_slot},
                  {"tp", st.engine->info().tp},
                  {"cache_type_k", kv_type_name(st.engine->options().kv_types.k)},
                  {"cache_type_v", kv_type_name(st.engine->options().kv_types.v)}};
    const std::string tool_use = st.chat->tool_use_source();
    if (!tool_use.empty()) props["chat_template_tool_use"] = tool_use;
    return props;
}

json slot_json(const ServerState & st, const Scheduler::SlotView & v) {
    json j = {{"id", v.id},
              {"n_ctx", st.n_ctx_slot},
              {"speculative", st.speculative_types != "none"},
              {"is_processing", v.busy}};
    // The running task's figures, else the last one's, as llama-server.
    if (v.task_id != 0) {
        j["id_task"] = v.task_id;
        j["n_prompt_tokens"] = v.n_prompt;
        j["n_prompt_tokens_processed"] = v.n_prompt_processed;
        j["n_prompt_tokens_cache"] = v.n_prompt_cached;
        j["params"] = v.settings ? json::parse(*v.settings, nullptr, false) : json();
        if (!j["params"].is_object()) j["params"] = {{"n_predict", v.n_predict}};
        j["next_token"] = json::array({{{"has_next_token", v.busy},
                                        {"has_new_line", v.has_new_line},
                                        {"n_remain", v.busy ? v.n_predict - v.n_decoded : 0},
                                        {"n_decoded", v.n_decoded}}});
    }
    j["n_cached_tokens"] = v.n_cached_tokens;
    return j;
}

int32_t slot_id(const Request & req) {
    const auto it = req.path_params.find("id_slot");
    const std::string v = it == req.path_params.end() ? "" : it->second;
    char * end = nullptr;
    const long id = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || id < 0 || id > INT32_MAX) {
        throw bad_request("'" + v + "' is not a slot id", "id_slot", "invalid_value");
    }
    return (int32_t) id;
}

// The file a save or restore names, under --slot-save-path.
std::string slot_path(const ServerState & st, const json & body) {
    const auto it = body.find("filename");
    if (it == body.end() || !it->is_string())
        throw bad_request("'filename' must be a string", "filename", "invalid_type");
    const std::string name = it->get<std::string>();
    const std::string problem = slot_file_name_problem(name);
    if (!problem.empty()) throw bad_request("'filename' " + problem, "filename", "invalid_value");
    std::string dir = st.opts.slot_save_path;
    if (!dir.empty() && dir.back() != '/') dir += '/';
    return dir + name;
}

Scheduler::SlotAction run_slot_action(const ServerState & st, Scheduler::SlotAction a) {
    a = st.scheduler->slot_action(std::move(a)).get();
    if (a.status != 0) throw ApiError(a.status, a.message, "id_slot", a.status == 501 ? "" : "slot_action_failed");
    return a;
}

// POST /v1/chat/completions/control {id, action: "reasoning_end"}, as
// llama-server: a running completion that armed reasoning_control ends its
// thinking now. An id that matches nothing running is not an error
// (the completion may just have finished): {"success": false, "message"}.
json control_completion(const ServerState & st, const Request & req) {
    const json body = parse_json_body(req.body);
    auto text = [&body](const char * name) {
        const auto it = body.find(name);
        if (it == body.end() || it->is_null()) return std::string();
        if (!it->is_string()) throw bad_request(std::string("'") + name + "' must be a string", name, "invalid_type");
        return it->get<std::string>();
    };
    const std::string id = text("id");
    const std::string action = text("action");
    if (id.empty()) throw bad_request("missing completion id", "id", "invalid_value");
    if (action != "reasoning_end") {
        throw bad_request("unknown control action '" + action + "' (reasoning_end is the one there is)", "action",
                          "invalid_value");
    }
    Scheduler::SlotAction a;
    a.kind = Scheduler::SlotAction::Kind::EndReasoning;
    a.completion_id = id;
    a = st.scheduler->slot_action(std::move(a)).get();
    if (a.status != 0 && a.status != 404 && a.status != 409) throw ApiError(a.status, a.message);
    json r = {{"success", a.status == 0}};
    if (a.status != 0) r["message"] = a.message;
    return r;
}

// POST /slots/{id}?action=save|restore|erase, as llama-server.
json slot_action(const ServerState & st, const Request & req) {
    if (st.opts.slot_save_path.empty()) {
        throw not_supported("This server does not support slots action. Start it with `--slot-save-path`");
    }
    const int32_t id = slot_id(req);
    const std::string action = req.get_param_value("action");
    const auto t0 = std::chrono::steady_clock::now();
    auto ms = [&t0] {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    };
    Scheduler::SlotAction a;
    a.slot = id;
    if (action == "erase") {
        a.kind = Scheduler::SlotAction::Kind::Erase;
        a = run_slot_action(st, std::move(a));
        return {{"id_slot", id}, {"n_erased", a.tokens.size()}};
    }
    if (action != "save" && action != "restore") {
        throw bad_request("'action' must be save, restore or erase; got '" + action + "'", "action", "invalid_value");
    }
    const json body = parse_json_body(req.body.empty() ? "{}" : req.body);
    const std::string path = slot_path(st, body);
    const std::string filename = body["filename"].get<std::string>();
    const ModelInfo & info = st.engine->info();
    const KvTypes types = st.engine->options().kv_types;
    if (action == "save") {
        a.kind = Scheduler::SlotAction::Kind::Save;
        a = run_slot_action(st, std::move(a));
        SlotImage image{info.file_size, info.header_digest,  types,
                        info.kv_format, std::move(a.tokens), std::move(a.kv)};
        size_t written = 0;
        try {
            written = write_slot_file(path, image);
        } catch (const SlotFileError & e) {
            throw ApiError(500, e.what(), "filename", "slot_file_error");
        }
        return {{"id_slot", id},
                {"filename", filename},
                {"n_saved", image.tokens.size()},
                {"n_written", written},
                {"timings", {{"save_ms", ms()}}}};
    }
    SlotImage image;
    try {
        image = read_slot_file(path);
    } catch (const SlotFileError & e) {
        // Clients see the file name, not where the server keeps it.
        std::string message = e.what();
        const size_t at = message.find(path);
        if (at != std::string::npos) message.replace(at, path.size(), filename);
        throw ApiError(std::ifstream(path).good() ? 400 : 404, message, "filename", "slot_file_error");
    }
    if (image.model_size != info.file_size || image.model_digest != info.header_digest) {
        throw bad_request("slot file '" + filename + "' was saved from another model", "filename", "invalid_value");
    }
    if (image.kv_types.k != types.k || image.kv_types.v != types.v) {
        throw bad_request(std::string("slot file '") + filename + "' holds a " + kv_type_name(image.kv_types.k) +
                              " / " + kv_type_name(image.kv_types.v) + " cache; this server stores " +
                              kv_type_name(types.k) + " / " + kv_type_name(types.v),
                          "filename", "invalid_value");
    }
    if (!image.kv_format.empty() && image.kv_format != info.kv_format) {
        throw bad_request(
            "slot file '" + filename + "' was saved with " + image.kv_format + "; this server has " + info.kv_format,
            "filename", "invalid_value");
    }
    const size_t n_read = image.kv.size();
    a.kind = Scheduler::SlotAction::Kind::Restore;
    a.lora = st.loras->scales();  // the file does not say; as llama-server, the server's own
    a.tokens = std::move(image.tokens);
    a.kv = std::move(image.kv);
    a = run_slot_action(st, std::move(a));
    return {{"id_slot", id},
            {"filename", filename},
            {"n_restored", a.tokens.size()},
            {"n_read", n_read},
            {"timings", {{"restore_ms", ms()}}}};
}

json model_entry(const ServerState & st) {
    const ModelInfo & info = st.engine->info();
    return {{"id", st.model_name},
            {"object", "model"},
            {"created", st.created},
            {"owned_by", "llama-tp"},
            {"aliases", st.opts.aliases},
            {"tags", st.opts.tags},
            {"meta",
             {{"n_vocab", info.n_vocab},
              {"n_ctx_train", info.n_ctx_train},
              {"n_embd", info.n_embd},
              {"n_params", info.n_params},
              {"size", info.weight_bytes},
              {"architecture", info.architecture}}}};
}

}  // namespace

void register_routes(httplib::Server & http, ServerState & st) {
    const std::string prefix = st.opts.api_prefix;
    auto at = [&prefix](const char * path) { return prefix + path; };
    // Authentication and readiness, before routing.
    http.set_pre_routing_handler([&st](const Request & req, Response & res) {
        const Admission a = admit(st.opts, req, res);
        if (a == Admission::Answered) return httplib::Server::HandlerResponse::Handled;
        if (a == Admission::Public) return httplib::Server::HandlerResponse::Unhandled;
        if (st.stopping) {
            send_error(res, ApiError(503, "the server is shutting down", "", "unavailable"));
            return httplib::Server::HandlerResponse::Handled;
        }
        if (!st.ready) {
            send_error(res, ApiError(503, "the model is loading", "", "model_loading"));
            return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
    install_error_handlers(http);

    http.set_logger([&st](const Request & req, const Response & res) {
        SRV_DBG("%s %s -> %d", req.method.c_str(), req.path.c_str(), res.status);
        st.metrics.count_request(metrics_endpoint(route_of(req.path, st.opts.api_prefix)), res.status);
    });

    auto health = [&st](const Request &, Response & res) {
        const std::string failure = st.ready ? st.engine->failure() : "";
        if (!failure.empty()) {
            send_json(res, {{"status", "error"}, {"error", "the rank group failed: " + failure}}, 503);
        } else if (st.ready) {
            send_json(res, {{"status", "ok"}});
        } else {
            send_json(res, {{"status", "loading"}}, 503);
        }
    };
    http.Get(at("/health"), health);
    http.Get(at("/v1/health"), health);

    auto models = guarded([&st](const Request &, Response & res) {
        send_json(res, {{"object", "list"}, {"data", json::array({model_entry(st)})}});
    });
    http.Get(at("/v1/models"), models);
    http.Get(at("/models"), models);

    auto completions =
        guarded([&st](const Request & req, Response & res) { handle_generation(st, Endpoint::Completion, req, res); });
    http.Post(at("/v1/completions"), completions);
    // llama-server's own shape under its own names.
    auto native = guarded([&st](const Request & req, Response & res) {
        handle_generation(st, Endpoint::Native, req, res, Shape::Native);
    });
    http.Post(at("/infill"), guarded([&st](const Request & req, Response & res) {
                  handle_generation(st, Endpoint::Infill, req, res, Shape::Native);
              }));
    http.Post(at("/completion"), native);
    http.Post(at("/completions"), native);

    auto chat =
        guarded([&st](const Request & req, Response & res) { handle_generation(st, Endpoint::Chat, req, res); });
    http.Post(at("/v1/chat/completions"), chat);
    http.Post(at("/chat/completions"), chat);

    http.Post(at("/v1/messages"), guarded([&st](const Request & req, Response & res) {
                  handle_generation(st, Endpoint::Chat, req, res, Shape::Anthropic);
              }));
    http.Post(at("/v1/messages/count_tokens"), guarded([&st](const Request & req, Response & res) {
                  send_json(res, {{"input_tokens", prompt_tokens(st, openai_chat_body(parse_json_body(req.body)))}});
              }));
    auto input_tokens = guarded([&st](const Request & req, Response & res) {
        send_json(
            res, {{"object", "response.input_tokens"}, {"input_tokens", prompt_tokens(st, parse_json_body(req.body))}});
    });
    http.Post(at("/v1/chat/completions/input_tokens"), input_tokens);
    http.Post(at("/v1/chat/completions/control"),
              guarded([&st](const Request & req, Response & res) { send_json(res, control_completion(st, req)); }));
    auto responses = guarded([&st](const Request & req, Response & res) {
        handle_generation(st, Endpoint::Chat, req, res, Shape::Responses);
    });
    http.Post(at("/v1/responses"), responses);
    http.Post(at("/responses"), responses);
    auto responses_tokens = guarded([&st](const Request & req, Response & res) {
        send_json(res, {{"object", "response.input_tokens"},
                        {"input_tokens", prompt_tokens(st, chat_body_from_responses(parse_json_body(req.body)))}});
    });
    http.Post(at("/v1/responses/input_tokens"), responses_tokens);
    http.Post(at("/responses/input_tokens"), responses_tokens);
    http.Post(at("/chat/completions/input_tokens"), input_tokens);

    http.Post(at("/tokenize"), guarded([&st](const Request & req, Response & res) {
                  const json body = parse_json_body(req.body);
                  const auto it = body.find("content");
                  if (it == body.end() || !it->is_string()) {
                      throw bad_request("'content' must be a string", "content", "invalid_type");
                  }
                  const bool add_special = bool_field(body, "add_special", false);
                  const bool parse_special = bool_field(body, "parse_special", true);
                  const bool with_pieces = bool_field(body, "with_pieces", false);
                  const auto & tok = st.engine->tokenizer();
                  const std::vector<int32_t> ids = tok.tokenize(it->get<std::string>(), add_special, parse_special);
                  if (!with_pieces) {
                      send_json(res, {{"tokens", ids}});
                      return;
                  }
                  json tokens = json::array();
                  for (int32_t id : ids) tokens.push_back({{"id", id}, {"piece", piece_json(tok.piece(id, true))}});
                  send_json(res, {{"tokens", tokens}});
              }));
    http.Post(at("/detokenize"), guarded([&st](const Request & req, Response & res) {
                  const json body = parse_json_body(req.body);
                  const auto it = body.find("tokens");
                  if (it == body.end() || !it->is_array()) {
                      throw bad_request("'tokens' must be an array of token ids", "tokens", "invalid_type");
                  }
                  const auto & tok = st.engine->tokenizer();
                  std::vector<int32_t> tokens;
                  for (const auto & t : *it) {
                      if (!t.is_number_integer() || t.get<long long>() < 0 || t.get<long long>() >= tok.n_vocab()) {
                          throw bad_request(
                              "'tokens' must hold token ids in [0, " + std::to_string(tok.n_vocab()) + ")", "tokens",
                              "invalid_value");
                      }
                      tokens.push_back(t.get<int32_t>());
                  }
                  send_json(res, {{"content", tok.detokenize(tokens, false)}});
              }));

    http.Get(at("/metrics"), guarded([&st](const Request &, Response & res) {
                 if (!st.opts.endpoint_metrics) {
                     throw not_supported("This server does not support metrics endpoint. Start it with `--metrics`");
                 }
                 const auto stats = st.scheduler->stats();
                 SchedulerGauges g;
                 g.busy_slots = stats.busy;
                 g.total_slots = st.scheduler->n_slots();
                 g.queued = stats.queued;
                 g.collectives = st.engine->collective_stats();
                 res.set_content(st.metrics.prometheus(g), "text/plain; version=0.0.4; charset=utf-8");
             }));

    http.Get(at("/props"), guarded([&st](const Request &, Response & res) { send_json(res, props_json(st)); }));
    http.Post(
        at("/props"), guarded([&st](const Request & req, Response & res) {
            if (!st.opts.endpoint_props) {
                throw not_supported("This server does not support changing global properties. Start it with `--props`");
            }
            parse_json_body(req.body);  // nothing is changeable yet, as in llama-server
            send_json(res, {{"success", true}});
        }));

    http.Get(at("/slots"), guarded([&st](const Request & req, Response & res) {
                 if (!st.opts.endpoint_slots) {
                     throw not_supported("This server does not support slots endpoint. Start it with `--slots`");
                 }
                 const auto views = st.scheduler->slot_views();
                 if (req.has_param("fail_on_no_slot") && !req.get_param_value("fail_on_no_slot").empty()) {
                     bool idle = false;
                     for (const auto & v : views) idle |= !v.busy;
                     if (!idle) throw ApiError(503, "no slot available", "", "", "unavailable_error");
                 }
                 json out = json::array();
                 for (const auto & v : views) out.push_back(slot_json(st, v));
                 send_json(res, out);
             }));

    // The global LoRA scales, which requests without their own `lora` take.
    http.Get(at("/lora-adapters"),
             guarded([&st](const Request &, Response & res) { send_json(res, st.loras->to_json()); }));
    http.Post(at("/lora-adapters"), guarded([&st](const Request & req, Response & res) {
                  st.loras->set_scales(st.loras->parse(parse_json(req.body), "body"));
                  send_json(res, {{"success", true}});
              }));

    http.Post(at("/slots/:id_slot"),
              guarded([&st](const Request & req, Response & res) { send_json(res, slot_action(st, req)); }));

    http.Post(at("/v1/embeddings"),
              guarded([&st](const Request & req, Response & res) { handle_embeddings(st, req, res, true); }));
    auto native_embeddings =
        guarded([&st](const Request & req, Response & res) { handle_embeddings(st, req, res, false); });
    http.Post(at("/embedding"), native_embeddings);
    http.Post(at("/embeddings"), native_embeddings);
    auto rerank = guarded([&st](const Request & req, Response & res) { handle_rerank(st, req, res); });
    for (const char * path : {"/rerank", "/reranking", "/v1/rerank", "/v1/reranking"}) http.Post(at(path), rerank);

    // llama-server's endpoints that llama-tp-server does not have: a clear 501.
    static const std::pair<const char *, const char *> missing[] = {
        {"/v1/audio/transcriptions", "audio input is not implemented"},
        {"/audio/transcriptions", "audio input is not implemented"},
    };
    for (const auto & [path, why] : missing) {
        auto refuse = [path = std::string(path), why = std::string(why)](const Request &, Response & res) {
            send_error(res, not_supported(path + " is not available in llama-tp-server: " + why));
        };
        http.Get(at(path), refuse);
        http.Post(at(path), refuse);
    }
    install_disabled_features(http, st.opts.api_prefix);

    http.Post(at("/apply-template"), guarded([&st](const Request & req, Response & res) {
                  const json body = parse_json_body(req.body);
                  GenerationRequest gr = parse_generation_request(Endpoint::Chat, body, st.opts.requests);
                  send_json(res, {{"prompt", st.chat->apply(gr.messages, gr.tools, turn_options(st, gr)).prompt}});
              }));
}

}  // namespace llama_tp::server
