#include "server/serving/generation.h"

#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "server/http/http_access.h"
#include "server/log.h"
#include "server/api/anthropic_messages.h"
#include "server/api/grammar_limits.h"
#include "server/api/native_response.h"
#include "server/api/openai_responses.h"
#include "server/api/reply_shape.h"
#include "server/api/response.h"
#include "server/chat/chat_output_parser.h"
#include "server/serving/lora_adapters.h"
#include "server/serving/prompt.h"
#include "server/serving/scheduler/scheduler.h"

#include <cpp-httplib/httplib.h>

#include "chat.h"
#include "json-schema-to-grammar.h"
#include "json.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <functional>
#include <memory>

namespace llama_tp::server {

using httplib::Request;
using httplib::Response;

namespace {

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
    task->user_starts = std::move(prepared.user_starts);
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
    task->context_shift = st.opts.context_shift && st.engine->can_rewind();
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
    task->post_sampling_probs = gr.post_sampling_probs;
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
        check_grammar(gr.sampling.grammar, "response_format");
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
    task->settings = std::make_shared<const std::string>(dump_json(native_settings(gr, task->n_predict, task->n_keep)));
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

}  // namespace

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

size_t prompt_tokens(ServerState & st, const json & chat_body) {
    GenerationRequest gr = parse_generation_request(Endpoint::Chat, chat_body, st.opts.requests);
    std::vector<std::string> stops;
    return prepare_prompt(st, gr, stops).tokens.size();
}

void handle_generation(ServerState & st, Endpoint endpoint, const Request & req, Response & res, Shape shape_kind) {
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
    const size_t n_prompts = 1 + request.more_prompts.size();
    const size_t room = (size_t) st.scheduler->n_slots() + (size_t) std::max(0, st.opts.max_queue);
    if (n_prompts * (size_t) n > room) {
        throw bad_request(std::to_string(n_prompts) + " prompts x " + std::to_string(n) +
                              " answers are more than the " + std::to_string(room) +
                              " the server's slots and queue hold",
                          "prompt", "invalid_value");
    }
    std::vector<Choice> choices;
    std::vector<std::unique_ptr<Task>> tasks;
    ResponseContext first;
    for (int32_t i = 0; i < (int32_t) n_prompts * n; ++i) {
        GenerationRequest gr = request;
        if (i >= n) gr.take_prompt(request.more_prompts[(size_t) (i / n) - 1]);
        // A fixed seed gives each choice its own.
        if (gr.sampling.seed != 0xFFFFFFFFu) gr.sampling.seed += (uint32_t) (i % n);
        std::shared_ptr<ChatOutputParser> parser;
        std::unique_ptr<Task> task = make_task(st, gr, parser);
        ResponseContext ctx = i == 0 ? ResponseContext::make(endpoint, gr.model.empty() ? st.model_name : gr.model,
                                                             gr.logprobs, &st.engine->tokenizer())
                                     : first;
        ctx.index = i;
        ctx.post_sampling_probs = gr.post_sampling_probs;
        ctx.return_tokens = gr.return_tokens;
        task->completion_id = ctx.id;
        task->reasoning_control = gr.reasoning_control;
        if (shape_kind == Shape::Native) {
            ctx.prompt = gr.prompt_is_tokens || endpoint == Endpoint::Infill
                             ? st.engine->tokenizer().detokenize(task->prompt, true)
                             : gr.prompt_text;
            ctx.settings = native_settings(gr, task->n_predict, task->n_keep);
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

}  // namespace llama_tp::server
