#pragma once
// Command-line flags of llama-tp-server. Names follow llama-server's so that a
// command line moves over unchanged.

#include "plugin/engine.h"
#include "plugin/sampler.h"

#include <cstdint>
#include <stdexcept>
#include <map>
#include <string>
#include <vector>

namespace llama_tp::server {

struct ServerOptions {
    EngineOptions engine;  // model path, context, batch, threads, tp, split, allreduce

    std::string host = "127.0.0.1";
    int port = 8080;
    int32_t n_parallel = 1;           // slots: requests decoded together
    int32_t n_predict = -1;           // default cap on generated tokens (-1: until the context is full)
    int timeout_s = 600;              // HTTP read/write timeout
    int32_t http_threads = -1;        // -1: n_parallel + a few
    size_t max_body_size = 8u << 20;  // larger request bodies are answered 413
    int32_t max_queue = 64;           // requests that may wait for a slot; more are answered 503

    std::vector<std::string> api_keys;  // empty: no authentication
    std::string alias;                  // model name reported by the API
    std::string chat_template;          // override: Jinja source or a built-in template name

    SamplingParams sampling;  // defaults for requests that leave a field out
    bool verbose = false;
    std::vector<std::string> ignored_flags;  // accepted for compatibility, no effect
    // Under mpirun: where process R reads the model (--model-path-rank R=PATH).
    std::map<int, std::string> model_path_of_process;
};

// A bad command line: the message says which flag and why.
class UsageError : public std::runtime_error {
  public:
    explicit UsageError(const std::string & what) : std::runtime_error(what) {}
};

// Throws UsageError. Sets `help` (and returns) when -h/--help was given.
ServerOptions parse_server_options(int argc, char ** argv, bool & help);

void print_usage(const char * argv0);

}  // namespace llama_tp::server
