#pragma once
// Command-line flags of llama-tp-server. Names follow llama-server's so that a
// command line moves over unchanged.

#include "runtime/engine.h"
#include "runtime/text/sampler.h"
#include "server/speculative/drafter.h"
#include "server/log.h"
#include "server/model_source.h"
#include "server/api/request.h"
#include "server/serving/task.h"

#include <cstdint>
#include <stdexcept>
#include <map>
#include <string>
#include <vector>

namespace llama_tp::server {

// Slots of `-np -1` (auto, the default), as llama-server.
constexpr int32_t kAutoSlots = 4;

struct ServerOptions {
    EngineOptions engine;      // model path, context, batch, threads, tp, split, allreduce
    ModelSource model_source;  // -hf / -mu / -dr: fetched into engine.model_path before loading
    // Router mode (no model given, --models-dir): a child server per model
    // of the folder, started on demand (server/router/model_router.h).
    std::string models_dir;
    std::string models_preset;  // --models-preset: an INI file of models and their options
    int32_t models_max = 4;     // children at once (0: no limit)
    bool models_autoload = true;
    std::vector<std::string> arguments;  // the command line after the program's name
    // No model given: a router over llama-server's cache (empty or not), as llama-server.
    bool models_from_cache = false;
    bool router() const { return !models_dir.empty() || !models_preset.empty() || models_from_cache; }

    std::vector<std::string> hosts{"127.0.0.1"};  // one listener each (a .sock path: a UNIX socket)
    int port = 8080;
    int32_t n_parallel = kAutoSlots;  // slots: requests decoded together
    int32_t n_predict = -1;           // default cap on generated tokens (-1: until the context is full)
    int timeout_s = 600;              // HTTP read/write timeout
    int32_t http_threads = -1;        // -1: n_parallel + a few
    size_t max_body_size = 8u << 20;  // larger request bodies are answered 413
    int32_t max_queue = 64;           // requests that may wait for a slot; more are answered 503
    bool reuse_port = false;          // --reuse-port: SO_REUSEPORT, several servers on one port
    std::string static_path;          // --path: files served under the API prefix ("": none)

    std::vector<std::string> api_keys;  // empty: no authentication
    std::string api_prefix;             // every route under this path ("" or "/x")
    bool endpoint_metrics = false;      // GET /metrics (--metrics)
    bool endpoint_slots = true;         // GET /slots (--no-slots turns it off)
    bool endpoint_props = false;        // POST /props (--props)
    // CORS: "*" (credentials: echo the Origin), "localhost" (echo local origins only) or a fixed origin.
    std::string cors_origins = "*";
    std::string cors_methods = "GET, POST, DELETE, OPTIONS";
    std::string cors_headers = "*";
    bool cors_credentials = true;
    std::vector<std::string> aliases;         // -a: the first names the model in the API ("": the file's name)
    std::vector<std::string> tags;            // --tags: listed with the model, informational
    std::string slot_save_path;               // directory for POST /slots/{id}?action=save|restore ("": off)
    int32_t cache_ram_mib = 8192;             // the prompt cache's host memory (-1: no limit, 0: off)
    bool cache_ram_given = false;             // else the default is capped by the memory the machine has
    int32_t ctx_checkpoints = 32;             // per slot, into the prompt cache (sliding windows, linear attention)
    int32_t checkpoint_min_step = 8192;       // least spacing of checkpoints at earlier user messages
    float slot_prompt_similarity = 0.1f;      // -sps (SlotReuse)
    bool special = false;                     // -sp: special tokens appear in the generated text
    std::string ssl_key_file, ssl_cert_file;  // both: HTTPS
    std::string chat_template;                // override: Jinja source or a built-in template name
    int reasoning_format = 1;                 // common_reasoning_format (auto): thinking -> reasoning_content
    int enable_reasoning = -1;                // -1: as the template decides, 0 off, 1 on
    int32_t reasoning_budget = -1;            // thinking tokens before the end tag is forced; -1: no limit
    int32_t sleep_idle_seconds = -1;          // the model is freed after this long without a request (-1: never)
    bool warmup = true;                       // one step at load (--no-warmup skips it)
    bool context_shift = false;               // a full slot drops half its tokens after n_keep and goes on
    int32_t n_keep = 0;                       // prompt tokens a context shift keeps (-1: all)
    std::string reasoning_budget_message;     // put before the forced end tag
    bool prefill_assistant = true;            // a trailing assistant message is continued
    bool skip_chat_parsing = false;           // --skip-chat-parsing: thinking and tool calls stay in content
    std::map<std::string, std::string> template_kwargs;  // --chat-template-kwargs (JSON values)
    bool lora_init_without_apply = false;                // the adapters' global scales start at 0

    RequestDefaults requests;         // what requests get for the fields they leave out
    SpeculativeOptions speculative;   // --spec-type, -md, --spec-draft-*, --spec-ngram-*, -lcs, -lcd
    bool spm_infill = false;          // /infill puts the suffix before the prefix
    bool embeddings = false;          // --embeddings: the embedding routes, and no generation
    Pooling pooling = Pooling::Mean;  // --pooling; --rerank: rank
    bool pooling_from_model = false;  // no --pooling: a reranker ranks, any other model means
    int embd_normalize = 2;           // --embd-normalize
    bool verbose = false;
    bool context_given = false;         // -c on the command line or in the environment
    bool slots_automatic = false;       // -np left to llama-server's automatic choice (-1 or not given)
    int32_t slot_context_cap = 0;       // --kv-unified-per-slot: most cells one slot uses; 0: no cap
    std::vector<std::string> warnings;  // one line per flag accepted without effect
    LogOptions log;
    // Under mpirun: where process R reads the model (--model-path-rank R=PATH).
    std::map<int, std::string> model_path_of_process;
};

// A bad command line: the message says which flag and why.
class UsageError : public std::runtime_error {
  public:
    explicit UsageError(const std::string & what) : std::runtime_error(what) {}
};

enum class ParseOutcome { Serve, Help, Version, FlagSupport };

// Reads llama-server's command line and llama-tp's own flags (server/README.md).
// Throws UsageError; returns early for --help and --flag-support.
ServerOptions parse_server_options(int argc, char ** argv, ParseOutcome & outcome);

void print_usage(const char * argv0);
void print_flag_support();

}  // namespace llama_tp::server
