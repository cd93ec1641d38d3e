#pragma once
// An error answered to the client as an OpenAI error object:
// {"error": {"message", "type", "param", "code"}}.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace llama_tp::server {

class ApiError : public std::runtime_error {
  public:
    ApiError(int status, const std::string & message, std::string param = "", std::string code = "",
             std::string type = "")
        : std::runtime_error(message),
          status(status),
          param(std::move(param)),
          code(std::move(code)),
          type(type.empty() ? default_type(status) : std::move(type)) {}

    int status;
    std::string param;  // the request field at fault; "" -> null
    std::string code;   // machine-readable code; "" -> null
    std::string type;
    // A prompt longer than a slot: both sizes, in the error object as
    // llama-server's (n_prompt_tokens, n_ctx); 0 where they do not apply.
    int32_t n_prompt_tokens = 0;
    int32_t n_ctx = 0;

    static std::string default_type(int status) {
        switch (status) {
            case 401:
                return "authentication_error";
            case 403:
                return "permission_error";
            case 404:
                return "not_found_error";
            case 501:
                return "not_supported_error";
            case 503:
                return "unavailable_error";
            default:
                return status >= 500 ? "server_error" : "invalid_request_error";
        }
    }
};

// An endpoint or feature switched off or missing here (llama-server's 501).
inline ApiError not_supported(const std::string & message) {
    return ApiError(501, message, "", "", "not_supported_error");
}

// A prompt of n_prompt tokens where a slot holds n_ctx (llama-server's
// exceed_context_size_error, with OpenAI's code).
inline ApiError exceeds_context(const std::string & message, const std::string & param, int32_t n_prompt,
                                int32_t n_ctx) {
    ApiError e(400, message, param, "context_length_exceeded", "exceed_context_size_error");
    e.n_prompt_tokens = n_prompt;
    e.n_ctx = n_ctx;
    return e;
}

inline ApiError bad_request(const std::string & message, const std::string & param = "",
                            const std::string & code = "") {
    return ApiError(400, message, param, code, "invalid_request_error");
}

}  // namespace llama_tp::server
