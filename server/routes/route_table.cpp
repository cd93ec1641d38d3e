#include "server/routes/route_table.h"

#include "runtime/engine.h"
#include "server/http/http_access.h"
#include "server/log.h"
#include "server/routes/handlers.h"

#include <cpp-httplib/httplib.h>

#include <vector>

namespace llama_tp::server {

using httplib::Request;
using httplib::Response;

namespace {

enum class Method { Get, Post };

struct Route {
    Method method;
    std::vector<const char *> paths;  // under --api-prefix
    RouteHandler handler;
    bool guarded = true;  // its exceptions become error objects
};

// Every path of the model's server, llama-server's aliases beside OpenAI's.
const std::vector<Route> & route_table() {
    static const std::vector<Route> routes = {
        {Method::Get, {"/health", "/v1/health"}, handle_health, false},
        {Method::Get, {"/v1/models", "/models"}, handle_models},
        {Method::Post, {"/v1/completions"}, handle_completions},
        {Method::Post, {"/completion", "/completions"}, handle_native_completion},
        {Method::Post, {"/infill"}, handle_infill},
        {Method::Post, {"/v1/chat/completions", "/chat/completions"}, handle_chat},
        {Method::Post,
         {"/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"},
         handle_chat_input_tokens},
        {Method::Post, {"/v1/chat/completions/control"}, handle_completion_control},
        {Method::Post, {"/v1/messages"}, handle_messages},
        {Method::Post, {"/v1/messages/count_tokens"}, handle_count_tokens},
        {Method::Post, {"/v1/responses", "/responses"}, handle_responses},
        {Method::Post, {"/v1/responses/input_tokens", "/responses/input_tokens"}, handle_responses_input_tokens},
        {Method::Post, {"/tokenize"}, handle_tokenize},
        {Method::Post, {"/detokenize"}, handle_detokenize},
        {Method::Post, {"/apply-template"}, handle_apply_template},
        {Method::Post, {"/v1/embeddings"}, handle_openai_embeddings},
        {Method::Post, {"/embedding", "/embeddings"}, handle_native_embeddings},
        {Method::Post, {"/rerank", "/reranking", "/v1/rerank", "/v1/reranking"}, handle_rerank},
        {Method::Get, {"/metrics"}, handle_metrics},
        {Method::Get, {"/props"}, handle_props},
        {Method::Post, {"/props"}, handle_set_props},
        {Method::Get, {"/slots"}, handle_slots},
        {Method::Post, {"/slots/:id_slot"}, handle_slot_action},
        {Method::Get, {"/lora-adapters"}, handle_lora_adapters},
        {Method::Post, {"/lora-adapters"}, handle_set_lora_adapters},
    };
    return routes;
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

    for (const Route & route : route_table()) {
        Handler h = [&st, handler = route.handler](const Request & req, Response & res) { handler(st, req, res); };
        if (route.guarded) h = guarded(h);
        for (const char * path : route.paths) {
            if (route.method == Method::Get) {
                http.Get(at(path), h);
            } else {
                http.Post(at(path), h);
            }
        }
    }

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
}

}  // namespace llama_tp::server
