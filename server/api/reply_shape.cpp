#include "server/api/reply_shape.h"

#include "server/api/native_response.h"

namespace llama_tp::server {

std::string ReplyShape::data_event(const json & j) {
    return "data: " + dump_json(j) + "\n\n";
}

json ReplyShape::merge(std::vector<json> wholes, const TaskEvent &) {
    return std::move(wholes.front());
}

json ReplyShape::progress_json(const TaskEvent & p) {
    return {
        {"total", p.n_prompt}, {"cache", p.n_cached}, {"processed", p.n_processed}, {"time_ms", p.timings.prompt_ms}};
}

std::string ReplyShape::stream_error(const ApiError & e) {
    return data_event(error_json(e));
}

namespace {

class OpenAiReply final : public ReplyShape {
  public:
    OpenAiReply(const ResponseContext & ctx, std::shared_ptr<ChatOutputParser> parser, bool include_usage)
        : ctx_(ctx), parser_(std::move(parser)), include_usage_(include_usage) {}

    json whole(const GeneratedText & out, const TaskEvent & done) override {
        if (parser_) return final_response(ctx_, parser_->parse(out.text), out.logprobs, done);
        return final_response(ctx_, AssistantMessage{out.text, "", {}}, out.logprobs, done);
    }

    // One response with every choice, usage over all of them.
    json merge(std::vector<json> wholes, const TaskEvent & total) override {
        json out = std::move(wholes.front());
        for (size_t i = 1; i < wholes.size(); ++i) out["choices"].push_back(wholes[i]["choices"][0]);
        out["usage"] = usage_json(total);
        return out;
    }

    std::string stream_start() override { return ctx_.endpoint == Endpoint::Chat ? event(role_chunk(ctx_)) : ""; }

    std::string stream_text(const TaskEvent & e) override {
        timings_ = e.has_timings ? timings_json(e) : json();
        if (!parser_) return event(text_chunk(ctx_, e.text, e.logprobs));
        text_ += e.text;
        return parsed_deltas(false);
    }

    std::string stream_progress(const TaskEvent & p) override {
        json chunk = text_chunk(ctx_, "", {});
        chunk["choices"] = json::array();
        chunk["prompt_progress"] = progress_json(p);
        return event(chunk);
    }

    std::string stream_done(const TaskEvent & done) override {
        std::string out;
        TaskEvent e = done;
        if (parser_) {
            out += parsed_deltas(true);
            e.finish_reason = finish_reason_after(e.finish_reason, called_tools_);
        }
        json chunk = finish_chunk(ctx_, e);
        // Where a usage chunk follows (stream_options.include_usage), the
        // usage and, as llama-server, the timings go with it alone.
        if (include_usage_) {
            chunk.erase("timings");
            chunk["usage"] = nullptr;
        }
        return out + event(chunk);
    }

    std::string stream_end(const TaskEvent & total) override {
        if (!include_usage_) return "data: [DONE]\n\n";
        json chunk = usage_chunk(ctx_, total);
        chunk["timings"] = timings_json(total);
        return event(chunk) + "data: [DONE]\n\n";
    }

  private:
    std::string event(json chunk) const {
        if (include_usage_ && !chunk.contains("usage")) chunk["usage"] = nullptr;
        if (!timings_.is_null() && !chunk.contains("timings")) chunk["timings"] = timings_;
        return data_event(chunk);
    }

    // Chat with a parser: deltas (content, reasoning, tool-call fragments) for
    // the text so far, rather than the raw text.
    std::string parsed_deltas(bool final) {
        std::string out;
        for (const json & delta : parser_->stream_deltas(text_, final)) {
            called_tools_ |= delta.contains("tool_calls");
            out += event(delta_chunk(ctx_, delta));
        }
        return out;
    }

    ResponseContext ctx_;
    std::shared_ptr<ChatOutputParser> parser_;
    bool include_usage_;
    std::string text_;  // everything so far, for the parser
    bool called_tools_ = false;
    json timings_;  // timings_per_token: the latest figures
};

class NativeReply final : public ReplyShape {
  public:
    explicit NativeReply(const ResponseContext & ctx) : ctx_(ctx) {}

    json whole(const GeneratedText & out, const TaskEvent & done) override {
        return native_final(ctx_, out.text, ctx_.return_tokens ? out.tokens : std::vector<int32_t>{}, out.logprobs,
                            done);
    }
    // Several choices: an array of results, as llama-server answers n_cmpl.
    json merge(std::vector<json> wholes, const TaskEvent &) override {
        if (wholes.size() == 1) return std::move(wholes.front());
        return json(std::move(wholes));
    }
    std::string stream_text(const TaskEvent & e) override { return data_event(native_chunk(ctx_, e)); }
    std::string stream_progress(const TaskEvent & p) override {
        return data_event({{"index", ctx_.index},
                           {"content", ""},
                           {"tokens", json::array()},
                           {"stop", false},
                           {"id_slot", p.id_slot},
                           {"prompt_progress", progress_json(p)}});
    }
    // llama-server ends a native stream with its final object, no [DONE].
    std::string stream_done(const TaskEvent & done) override {
        return data_event(native_final(ctx_, "", {}, {}, done));
    }

  private:
    ResponseContext ctx_;
};

}  // namespace

std::unique_ptr<ReplyShape> openai_reply(const ResponseContext & ctx, std::shared_ptr<ChatOutputParser> parser,
                                         bool include_usage) {
    return std::make_unique<OpenAiReply>(ctx, std::move(parser), include_usage);
}

std::unique_ptr<ReplyShape> native_reply(const ResponseContext & ctx) {
    return std::make_unique<NativeReply>(ctx);
}

}  // namespace llama_tp::server
