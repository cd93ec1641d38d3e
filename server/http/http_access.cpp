#include "server/http/http_access.h"

#include "server/log.h"

#include <cpp-httplib/httplib.h>

namespace llama_tp::server {

namespace {

constexpr const char * kJson = "application/json; charset=utf-8";

bool is_local_origin(const std::string & origin) {
    const size_t scheme = origin.find("://");
    std::string host = scheme == std::string::npos ? origin : origin.substr(scheme + 3);
    if (host.rfind("[::1]", 0) == 0) return true;
    host = host.substr(0, host.find_first_of(":/"));
    return host == "localhost" || host == "127.0.0.1";
}

// The Access-Control-Allow-Origin a request gets ("" for none), as llama-server.
std::string allowed_origin(const ServerOptions & o, const std::string & origin) {
    if (o.cors_origins == "*") return o.cors_credentials && !origin.empty() ? origin : "*";
    if (o.cors_origins == "localhost") return is_local_origin(origin) ? origin : "";
    return o.cors_origins;
}

bool is_public_path(const std::string & path) {
    return path == "/health" || path == "/v1/health";
}

std::string request_api_key(const httplib::Request & req) {
    const std::string auth = req.get_header_value("Authorization");
    static const std::string bearer = "Bearer ";
    if (auth.size() > bearer.size() && auth.compare(0, bearer.size(), bearer) == 0) {
        return auth.substr(bearer.size());
    }
    return req.get_header_value("X-Api-Key");
}

// Comparison time does not depend on where the first difference is.
bool same_key(const std::string & a, const std::string & b) {
    if (a.size() != b.size()) {
        return false;
    }
    unsigned char diff = 0;
    for (size_t i = 0; i < a.size(); i++) {
        diff |= (unsigned char) (a[i] ^ b[i]);
    }
    return diff == 0;
}

}  // namespace

void send_json(httplib::Response & res, const json & body, int status) {
    res.status = status;
    res.set_content(dump_json(body), kJson);
}

void send_error(httplib::Response & res, const ApiError & e) {
    if (e.status >= 500) {
        SRV_WRN("answering %d: %s", e.status, e.what());
    }
    send_json(res, error_json(e), e.status);
}

std::string route_of(const std::string & path, const std::string & prefix) {
    if (prefix.empty()) return path;
    return path.rfind(prefix, 0) == 0 ? path.substr(prefix.size()) : std::string();
}

Admission admit(const ServerOptions & o, const httplib::Request & req, httplib::Response & res) {
    const std::string origin = allowed_origin(o, req.get_header_value("Origin"));
    if (!origin.empty()) res.set_header("Access-Control-Allow-Origin", origin);
    // Preflight, as llama-server answers it (browsers send no key with it).
    if (req.method == "OPTIONS") {
        res.set_header("Access-Control-Allow-Credentials", o.cors_credentials ? "true" : "false");
        res.set_header("Access-Control-Allow-Methods", o.cors_methods);
        res.set_header("Access-Control-Allow-Headers", o.cors_headers);
        res.status = 200;
        res.set_content("", "text/html");
        return Admission::Answered;
    }
    if (is_public_path(route_of(req.path, o.api_prefix))) return Admission::Public;
    if (o.api_keys.empty()) return Admission::Admitted;
    const std::string key = request_api_key(req);
    bool ok = false;
    for (const auto & k : o.api_keys) {
        ok |= same_key(key, k);
    }
    if (ok) return Admission::Admitted;
    send_error(
        res, ApiError(401, key.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key", "",
                      "invalid_api_key", "authentication_error"));
    return Admission::Answered;
}

Handler guarded(Handler h) {
    return [h = std::move(h)](const httplib::Request & req, httplib::Response & res) {
        try {
            h(req, res);
        } catch (const ApiError & e) {
            send_error(res, e);
        } catch (const std::exception & e) {
            send_error(res, ApiError(500, std::string("internal error: ") + e.what(), "", "internal_error"));
        }
    };
}

void install_disabled_features(httplib::Server & http, const std::string & prefix) {
    static const std::pair<const char *, const char *> disabled[] = {
        {"/cors-proxy", "llama-tp-server has no MCP proxy"},
        {"/tools", "llama-tp-server has no server-side tools"},
    };
    for (const auto & [path, why] : disabled) {
        auto refuse = [why = std::string(why)](const httplib::Request &, httplib::Response & res) {
            send_error(res, ApiError(403, "this feature is disabled (" + why + ")", "", "", "feature_disabled"));
        };
        http.Get(prefix + path, refuse);
        http.Post(prefix + path, refuse);
    }
}

void install_error_handlers(httplib::Server & http) {
    // Unknown routes, wrong methods, and anything else that left no body.
    http.set_error_handler([](const httplib::Request & req, httplib::Response & res) {
        if (!res.body.empty()) {
            return;
        }
        if (res.status == 404) {
            send_error(res, ApiError(404, "no route for " + req.method + " " + req.path, "", "not_found"));
        } else if (res.status == 405) {
            send_error(res, ApiError(405, "method " + req.method + " not allowed on " + req.path, "",
                                     "method_not_allowed", "invalid_request_error"));
        } else if (res.status == 413) {
            send_error(
                res, ApiError(413, "the request body is too large", "", "payload_too_large", "invalid_request_error"));
        } else if (res.status >= 400) {
            send_error(res, ApiError(res.status, "bad request (HTTP " + std::to_string(res.status) + ")", "", "",
                                     res.status >= 500 ? "server_error" : "invalid_request_error"));
        }
    });
    http.set_exception_handler([](const httplib::Request &, httplib::Response & res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception & e) {
            what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError(500, "internal error: " + what, "", "internal_error"));
    });
}

}  // namespace llama_tp::server
