#pragma once
// An error answered to the client as an OpenAI error object:
// {"error": {"message", "type", "param", "code"}}.

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

inline ApiError bad_request(const std::string & message, const std::string & param = "",
                            const std::string & code = "") {
    return ApiError(400, message, param, code, "invalid_request_error");
}

}  // namespace llama_tp::server
