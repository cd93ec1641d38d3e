#pragma once
// The route table of the model's server: each path under --api-prefix to a
// named handler (server/routes/handlers.h), behind authentication and
// readiness; and the state every handler shares.

#include "server/http/metrics.h"
#include "server/server_options.h"

#include <atomic>
#include <cstdint>
#include <string>

namespace httplib {
class Server;
}

namespace llama_tp {
class Engine;
}

namespace llama_tp::server {

class Scheduler;
class ChatFormatter;
class LoraAdapters;

// Shared by all HTTP threads. The pointers are set, then `ready` is raised,
// once the model has loaded; until then every route but /health answers 503.
struct ServerState {
    explicit ServerState(const ServerOptions & o) : opts(o) {}

    const ServerOptions & opts;
    std::atomic<bool> ready{false};
    std::atomic<bool> stopping{false};

    Engine * engine = nullptr;
    Scheduler * scheduler = nullptr;
    ChatFormatter * chat = nullptr;
    LoraAdapters * loras = nullptr;
    std::string model_name;                  // --alias, else the model file name
    int32_t n_ctx = 0;                       // KV cells in all
    int32_t n_ctx_slot = 0;                  // per slot
    std::string speculative_types = "none";  // the drafters in use, as --spec-type names them
    int64_t created = 0;                     // load time, unix seconds

    std::atomic<uint64_t> next_task_id{1};
    Metrics metrics;
};

// Authentication, readiness, logging and every route of the table.
void register_routes(httplib::Server & http, ServerState & state);

}  // namespace llama_tp::server
