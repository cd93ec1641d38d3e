#pragma once
// How a generation is answered in one API's shape: a whole JSON object at the
// end, or a stream of server-sent events. The routes drive every shape the
// same way (server/serving/generation.cpp); one implementation per API: OpenAI's
// (completions and chat), llama-server's native one, Anthropic's Messages.

#include "server/http/api_error.h"
#include "server/chat/chat_output_parser.h"
#include "server/api/response.h"
#include "server/serving/task.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace llama_tp::server {

using json = nlohmann::json;

// What a blocking answer collected from the task's events.
struct GeneratedText {
    std::string text;
    std::vector<TokenLogprob> logprobs;
    std::vector<int32_t> tokens;
};

class ReplyShape {
  public:
    virtual ~ReplyShape() = default;

    virtual json whole(const GeneratedText & out, const TaskEvent & done) = 0;
    // The answer to a request for several choices (n), from each one's whole()
    // (total: their counts added up). One choice: that one.
    virtual json merge(std::vector<json> wholes, const TaskEvent & total);

    // Stream events, each complete ("data: ...\n\n", or with an "event:" line).
    virtual std::string stream_start() { return ""; }
    virtual std::string stream_text(const TaskEvent & text) = 0;
    // Prompt processing so far (requests with return_progress); "" by default.
    virtual std::string stream_progress(const TaskEvent & progress) {
        (void) progress;
        return "";
    }
    // One choice's last events; stream_end closes the stream once every
    // choice is done (total: their counts added up).
    virtual std::string stream_done(const TaskEvent & done) = 0;
    virtual std::string stream_end(const TaskEvent & total) {
        (void) total;
        return "";
    }
    virtual std::string stream_error(const ApiError & e);

  protected:
    // "data: <json>\n\n"
    static std::string data_event(const json & j);
    // llama-server's prompt_progress object.
    static json progress_json(const TaskEvent & progress);
};

// OpenAI's completion or chat shape (ctx.endpoint); with a parser, chat
// output is read as content, reasoning and tool calls.
std::unique_ptr<ReplyShape> openai_reply(const ResponseContext & ctx, std::shared_ptr<ChatOutputParser> parser,
                                         bool include_usage);
// llama-server's /completion shape.
std::unique_ptr<ReplyShape> native_reply(const ResponseContext & ctx);

}  // namespace llama_tp::server
