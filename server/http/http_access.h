#pragma once
// What every HTTP front of llama-tp-server shares (the model's routes, and
// the router's): error objects, CORS and its preflight, the API key, and the
// handlers for unknown routes and exceptions, as llama-server answers them.

#include "server/http/api_error.h"
#include "server/api/response.h"
#include "server/server_options.h"

#include <functional>
#include <string>

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace llama_tp::server {

void send_json(httplib::Response & res, const json & body, int status = 200);
// An OpenAI error object with the error's status (5xx logged as warnings).
void send_error(httplib::Response & res, const ApiError & e);

// The route a request path names under --api-prefix ("" when outside it).
std::string route_of(const std::string & path, const std::string & prefix);

enum class Admission {
    Answered,  // preflight answered, or refused (401): the request is done
    Public,    // /health: no key needed, answered whatever the state
    Admitted,  // the key checked out (or none is set)
};

// Sets the CORS headers the request gets, answers a preflight, and checks
// the API key (Authorization: Bearer, or X-Api-Key) outside /health.
Admission admit(const ServerOptions & o, const httplib::Request & req, httplib::Response & res);

using Handler = std::function<void(const httplib::Request &, httplib::Response &)>;
// Turns any exception a handler throws into an OpenAI error object.
Handler guarded(Handler h);

// Error objects for unknown routes, wrong methods, too-large bodies and
// exceptions that escape a handler.
void install_error_handlers(httplib::Server & http);

// The web UI's experimental MCP proxy (/cors-proxy) and server-side tools
// (/tools) under the API prefix: 403 feature_disabled, as llama-server
// answers without --webui-mcp-proxy / --tools (which have no effect here).
void install_disabled_features(httplib::Server & http, const std::string & prefix);

}  // namespace llama_tp::server
