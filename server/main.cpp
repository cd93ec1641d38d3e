// llama-tp-server: parses flags, binds the port, loads the model (answering
// /health with 503 meanwhile), then serves until SIGINT/SIGTERM. Under
// mpirun, process 0 serves and the other processes follow its steps.

#include "ggml-ext/comm/process_group.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "server/chat/chat_format.h"
#include "server/chat/template_sandbox.h"
#include "server/build_info.h"
#include "server/serving/context_size.h"
#include "server/serving/cache/prompt_cache.h"
#include "server/routes/route_table.h"
#include "server/http/listener.h"
#include "server/log.h"
#include "server/serving/lora_adapters.h"
#include "server/router/model_router.h"
#include "server/serving/scheduler/scheduler.h"
#include "server/serving/warm_up.h"
#include "server/server_lifetime.h"
#include "server/server_options.h"

#include <malloc.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <pthread.h>
#include <unistd.h>
#include <thread>

using namespace llama_tp;
using namespace llama_tp::server;

namespace {

using Lifetime = std::shared_ptr<ServerLifetime>;

// SIGINT/SIGTERM are blocked in every thread and taken here with sigwait, so
// shutdown runs as ordinary code rather than inside a signal handler.
void signal_thread(sigset_t set, Lifetime life) {
    int n_signals = 0;
    while (true) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0) {
            continue;
        }
        n_signals++;
        if (!life->ready()) {
            SRV_INF("signal %d during startup: exiting", sig);
            std::_Exit(0);
        }
        if (n_signals > 1) {
            SRV_WRN("second signal: exiting without cleanup");
            std::_Exit(1);
        }
        SRV_INF("signal %d: shutting down", sig);
        life->request_stop();
    }
}

std::string file_name(const std::string & path) {
    const auto slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The model's name in the API, as llama-server's: the first alias, else the
// repository it was fetched from, else (ours) the file's name.
// -hfd: the draft model from Hugging Face, through the target's cache,
// token and --offline (the cached file, as -hf's).
ModelSource draft_source(const ServerOptions & opts) {
    ModelSource d;
    d.hf_repo = opts.speculative.draft_hf_repo;
    d.hf_flag = "-hfd";
    d.hf_file = opts.speculative.draft_hf_file;
    d.hf_token = opts.model_source.hf_token;
    d.offline = opts.model_source.offline;
    return d;
}

std::string model_name(const ServerOptions & opts) {
    if (!opts.aliases.empty()) return opts.aliases.front();
    if (!opts.model_source.hf_repo.empty()) return opts.model_source.hf_repo;
    if (!opts.model_source.docker_repo.empty()) return opts.model_source.docker_repo;
    return file_name(opts.engine.model_path);
}

std::string human_count(int64_t n) {
    char buf[32];
    if (n >= 1000000000) {
        std::snprintf(buf, sizeof(buf), "%.2fB", n / 1e9);
    } else if (n >= 1000000) {
        std::snprintf(buf, sizeof(buf), "%.2fM", n / 1e6);
    } else if (n >= 1000) {
        std::snprintf(buf, sizeof(buf), "%.1fK", n / 1e3);
    } else {
        std::snprintf(buf, sizeof(buf), "%lld", (long long) n);
    }
    return buf;
}

// glibc gives each thread that allocates its own heap arena (up to 8 per
// core); the HTTP pool grows to 4 x (slots + 8) threads under load, and
// every arena keeps its freed pages: a 2-minute soak with 64 clients grew the
// resident memory by 11% with default arenas and by 4% with two. The
// environment variable MALLOC_ARENA_MAX still wins when set.
void limit_malloc_arenas() {
#ifdef M_ARENA_MAX
    if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 2);
#endif
}

// glibc keeps freed pages of its heaps resident; an idle server gives them
// back (a few milliseconds, and only when no request is running or waiting).
void release_free_memory() {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

// Without -c, or with -c and the slots left automatic, the context is fitted
// to process 0's memory, and every process of a launch takes that choice
// (they must agree on the cache's shape).
void choose_context(ServerOptions & opts, ProcessGroup * processes) {
    int32_t choice[2] = {0, 0};  // cells, shared
    if (processes == nullptr || processes->rank() == 0) {
        try {
            const KvFootprint kv = kv_footprint(opts.engine);
            const ContextChoice c = opts.context_given ? fit_requested_context(kv, opts.n_parallel, opts.engine.n_ctx,
                                                                               available_memory_bytes())
                                                       : fit_context(kv, opts.n_parallel, available_memory_bytes());
            choice[0] = c.n_ctx;
            choice[1] = c.shared;
            SRV_INF("context: %d slots x %d cells%s = %d (%s; %s)", opts.n_parallel, c.per_slot,
                    c.shared ? " of one shared pool" : "", c.n_ctx, c.reason.c_str(),
                    opts.context_given ? "-np sets the slots, -kvu shares the cells" : "-c sets the total");
        } catch (const Error &) {
            // The model's load reports what is wrong with the file.
            choice[0] = opts.context_given ? opts.engine.n_ctx : 0;
        }
    }
    if (processes != nullptr) {
        std::vector<uint8_t> bytes(sizeof choice);
        std::memcpy(bytes.data(), choice, sizeof choice);
        processes->broadcast(bytes, Patience::Startup);
        std::memcpy(choice, bytes.data(), sizeof choice);
    }
    opts.engine.n_ctx = choice[0];
    opts.engine.kv_unified = choice[1] != 0;
}

// The cells one slot may use: its share of the cache, at most
// --kv-unified-per-slot; a cap above the share says it cannot bind.
int32_t slot_context(int32_t n_ctx, const ServerOptions & opts) {
    // A shared pool (llama-server's kv_unified) lets any slot use every cell.
    const int32_t share = opts.engine.kv_unified ? n_ctx : n_ctx / opts.n_parallel;
    const int32_t cap = opts.slot_context_cap;
    if (cap > 0 && cap < share) {
        SRV_INF("context: each slot capped at %d of its %d cells (--kv-unified-per-slot)", cap, share);
        return cap;
    }
    if (cap > share) {
        SRV_WRN(
            "--kv-unified-per-slot %d exceeds a slot's %d cells and has no effect (raise -c, or leave it out "
            "to size the cache to slots x the cap)",
            cap, share);
    }
    return share;
}

// A process other than the first of an MPI launch: no HTTP. It ends with the
// shutdown step of process 0, or on a signal (mpirun taking the job down).
int follow_process_zero(const ServerOptions & opts, const ProcessGroup & processes, const sigset_t & signals) {
    pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
    try {
        std::unique_ptr<Engine> engine = Engine::load(opts.engine);
        SRV_INF("process %d on %s follows process 0", processes.rank(), processes.host().c_str());
        engine->follow();
    } catch (const std::exception & e) {
        SRV_ERR("process %d on %s: %s; stopping", processes.rank(), processes.host().c_str(), e.what());
        // A moment for process 0, which saw the same failure, to answer its
        // clients before mpirun takes the job down.
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        return 1;
    }
    return 0;
}

// A rank group that failed cannot serve again: answer /health with the
// failure for a moment, then exit non-zero for a supervisor to restart it.
void stop_after_group_failure(const std::string & why, Lifetime life) {
    SRV_ERR("the rank group failed: %s; exiting (restart the group)", why.c_str());
    std::thread([life] {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        life->group_failed();
        life->request_stop();
    }).detach();
}

}  // namespace

// Starts serving on every listener; returns their URLs for the log.
std::string start_listeners(std::vector<std::unique_ptr<Listener>> & listeners, const Lifetime & life) {
    std::string urls;
    for (auto & l : listeners) {
        // Serving ends when stop() is called, and only then is that expected.
        l->start([life] {
            if (!life->stop_requested()) {
                SRV_ERR("HTTP server stopped unexpectedly");
                life->http_failed();
            }
            life->request_stop();
        });
        urls += (urls.empty() ? "" : ", ") + l->url();
    }
    return urls;
}

// Router mode: no model, no ranks; the children load the models.
int run_router(const ServerOptions & opts, const sigset_t & sigs, const char * argv0, const Lifetime & life) {
    if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
        SRV_ERR(
            "router mode (no -m, or --models-dir without a model) runs as one process, not under mpirun: "
            "launch llama-tp-server with -m under mpirun instead");
        return 1;
    }
    std::thread(signal_thread, sigs, life).detach();
    std::unique_ptr<ModelRouter> router;
    std::vector<std::unique_ptr<Listener>> listeners;
    // Requests for every model, and those waiting for a model to load, share
    // the router's HTTP threads.
    ServerOptions front = opts;
    if (front.http_threads <= 0) front.http_threads = std::max(16, 4 * opts.models_max + 8);
    try {
        char exe[4096] = {};
        const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        router = std::make_unique<ModelRouter>(opts, n > 0 ? std::string(exe, (size_t) n) : std::string(argv0));
        for (const std::string & address : opts.hosts) {
            listeners.push_back(std::make_unique<Listener>(
                front, address, [&router](httplib::Server & h) { router->register_routes(h); }));
        }
    } catch (const std::exception & e) {
        SRV_ERR("%s", e.what());
        return 1;
    }
    const std::string urls = start_listeners(listeners, life);
    life->set_ready();
    const std::string from = opts.models_dir.empty() ? "llama-server's cache (LLAMA_CACHE)" : opts.models_dir;
    SRV_INF("llama-tp-server router ready: %zu models in %s, at most %d at once%s, listening on %s", router->n_models(),
            from.c_str(), opts.models_max, opts.models_autoload ? ", loaded on first use" : "", urls.c_str());
    if (router->n_models() == 0) {
        SRV_WRN("no models to serve: pass -m FILE, -hf REPO[:QUANT] (downloaded into the cache) or --models-dir DIR");
    }
    life->wait_for_stop();
    router->shut_down();  // forwarded requests end with their children
    listeners.clear();
    router.reset();
    SRV_INF("stopped");
    return life->exit_status();
}

int main(int argc, char ** argv) {
    if (argc == 2 && std::strcmp(argv[1], llama_tp::server::kTemplateRendererArgument) == 0) {
        return llama_tp::server::run_chat_template_renderer();
    }
    limit_malloc_arenas();
    // Before any thread starts (libcommon's log thread, which the flag parser
    // may start, and MPI's), so that all of them inherit the mask. A shell
    // may start a background job with SIGINT ignored, and an ignored signal
    // never reaches sigwait: restore the default disposition first.
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    ServerOptions opts;
    try {
        ParseOutcome outcome = ParseOutcome::Serve;
        opts = parse_server_options(argc, argv, outcome);
        if (outcome == ParseOutcome::Help) {
            print_usage(argv[0]);
            return 0;
        }
        if (outcome == ParseOutcome::Version) {
            std::fputs(version_text().c_str(), stdout);
            return 0;
        }
        if (outcome == ParseOutcome::FlagSupport) {
            print_flag_support();
            return 0;
        }
    } catch (const UsageError & e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    set_log_level(opts.verbose ? LogLevel::Debug : LogLevel::Info);
    try {
        configure_log(opts.log);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    for (const auto & w : opts.warnings) SRV_WRN("%s", w.c_str());
    // Shared with the threads that may end the process, detached ones included.
    const Lifetime life = std::make_shared<ServerLifetime>();
    if (opts.router()) return run_router(opts, sigs, argv[0], life);
    try {
        // Before any graph: see ggml_graphs_off_for_capture.
        if (ggml_graphs_off_for_capture(Environment::of_process())) setenv("GGML_CUDA_DISABLE_GRAPHS", "1", 1);
    } catch (const Error & e) {
        SRV_ERR("%s", e.what());
        return 1;
    }

    // Before MPI starts: a process still downloading would miss the first
    // collective's deadline, while MPI's own start waits for every process.
    if (opts.model_source.remote() || !opts.speculative.draft_hf_repo.empty()) {
        try {
            if (opts.model_source.remote()) opts.engine.model_path = fetch_model(opts.model_source);
            if (!opts.speculative.draft_hf_repo.empty()) opts.speculative.draft_model = fetch_model(draft_source(opts));
        } catch (const DownloadInterrupted & e) {
            SRV_INF("%s", e.what());
            return 0;
        } catch (const Error & e) {
            SRV_ERR("%s", e.what());
            return 1;
        }
    }

    // MPI starts threads of its own: after the mask, so that they inherit it.
    std::unique_ptr<ProcessGroup> processes;
    try {
        processes = join_launched_processes(kProcessTimeout_s);
    } catch (const Error & e) {
        SRV_ERR("%s", e.what());
        return 1;
    }
    opts.engine.processes = processes.get();
    const auto own_path = opts.model_path_of_process.find(processes ? processes->rank() : 0);
    if (own_path != opts.model_path_of_process.end()) opts.engine.model_path = own_path->second;
    if (!opts.context_given && opts.slot_context_cap > 0) {
        // As llama-server: the cache is sized to the slots' cap.
        opts.engine.n_ctx = opts.n_parallel * opts.slot_context_cap;
        SRV_INF("context: %d slots x %d cells = %d (--kv-unified-per-slot; -c sets the total)", opts.n_parallel,
                opts.slot_context_cap, opts.engine.n_ctx);
    } else if (!opts.context_given || (opts.slots_automatic && !opts.engine.kv_unified)) {
        try {
            choose_context(opts, processes.get());
        } catch (const Error & e) {
            SRV_ERR("%s", e.what());
            return 1;
        }
    }
    if (processes && processes->rank() != 0) {
        opts.engine.shares_cores = false;  // the draft model runs on process 0 only
        return follow_process_zero(opts, *processes, sigs);
    }
    std::thread(signal_thread, sigs, life).detach();

    ServerState state(opts);
    std::vector<std::unique_ptr<Listener>> listeners;
    try {
        for (const std::string & address : opts.hosts) {
            listeners.push_back(std::make_unique<Listener>(
                opts, address, [&state](httplib::Server & h) { register_routes(h, state); }));
        }
    } catch (const std::exception & e) {
        SRV_ERR("%s", e.what());
        return 1;
    }
    const std::string urls = start_listeners(listeners, life);
    SRV_INF("listening on %s (loading %s)", urls.c_str(), opts.engine.model_path.c_str());

    auto fail_startup = [&](const std::string & what) {
        SRV_ERR("%s", what.c_str());
        life->request_stop();
        listeners.clear();
        return 1;
    };

    std::unique_ptr<Engine> engine;
    try {
        engine = Engine::load(opts.engine);
        if (opts.warmup) warm_up(*engine);
    } catch (const Error & e) {
        return fail_startup(std::string("failed to load model: ") + e.what());
    } catch (const std::exception & e) {
        return fail_startup(std::string("failed to load model: ") + e.what());
    }

    const int32_t n_ctx = engine->options().n_ctx > 0 ? engine->options().n_ctx : engine->info().n_ctx_train;
    const int32_t n_ctx_slot = slot_context(n_ctx, opts);
    if (n_ctx_slot < 2) {
        return fail_startup("context of " + std::to_string(n_ctx) + " tokens is too small for " +
                            std::to_string(opts.n_parallel) + " slots");
    }

    std::unique_ptr<ChatFormatter> chat;
    try {
        chat = std::make_unique<ChatFormatter>(engine->tokenizer(), opts.chat_template);
    } catch (const std::exception & e) {
        return fail_startup(e.what());
    }

    if (opts.embeddings) {
        // A reranker's file says rank pooling; upstream takes it when --pooling is left out.
        if (opts.pooling_from_model && engine->classifier() != nullptr) opts.pooling = Pooling::Rank;
        if (opts.pooling == Pooling::Rank && engine->classifier() == nullptr) {
            return fail_startup(
                "--rerank (--pooling rank) needs a reranker: this model has no classification head "
                "(cls.output.weight)");
        }
        if (opts.pooling == Pooling::Rank) {
            SRV_INF("reranking: /rerank scores with the model's %d-output classification head",
                    engine->classifier()->n_out());
        }
    }

    std::unique_ptr<LoraAdapters> loras;
    try {
        loras = std::make_unique<LoraAdapters>(opts.engine.loras, opts.lora_init_without_apply);
    } catch (const Error & e) {
        return fail_startup(e.what());
    }
    for (size_t i = 0; i < loras->size(); ++i) {
        SRV_INF("LoRA adapter %zu: %s, scale %g", i, opts.engine.loras[i].path.c_str(), loras->scales()[i]);
    }

    // Linear attention's state cannot be cut back (Engine::can_rewind): no
    // context shift or reused chunks, which take positions back; drafts go
    // back to a state saved before them (EngineOptions::draft_states).
    if (!engine->can_rewind()) {
        if (opts.context_shift)
            SRV_WRN("--context-shift has no effect: this model's recurrent state cannot be cut back");
        if (opts.requests.n_cache_reuse > 0)
            SRV_WRN("--cache-reuse has no effect: this model's recurrent state cannot be cut back");
    }
    std::vector<std::unique_ptr<Drafter>> drafters;
    if (opts.speculative.enabled() && !engine->can_take_back_drafts()) {
        SRV_WRN("speculative decoding is off: this model's recurrent state cannot take back a rejected draft");
    } else if (opts.speculative.enabled() && opts.embeddings) {
        SRV_WRN("speculative decoding has no effect with --embeddings: nothing is generated");
    } else if (opts.speculative.enabled()) {
        try {
            drafters = make_drafters(opts.speculative, *engine, opts.n_parallel, n_ctx_slot);
        } catch (const std::exception & e) {
            return fail_startup(std::string("speculative decoding: ") + e.what());
        }
    }

    SlotReuse reuse;
    reuse.prompt_similarity = opts.slot_prompt_similarity;
    const PromptCacheLimit cache_limit =
        prompt_cache_limit(opts.cache_ram_mib, opts.cache_ram_given, available_memory_bytes());
    reuse.prompt_cache_bytes = cache_limit.bytes;
    reuse.ctx_checkpoints = opts.ctx_checkpoints;
    reuse.checkpoint_min_step = opts.checkpoint_min_step;
    if (cache_limit.bytes != 0)
        SRV_INF("prompt cache: slots' prompts kept in host memory, %s", cache_limit.reason.c_str());
    Scheduler scheduler(*engine, opts.n_parallel, n_ctx_slot, engine->options().n_batch, opts.max_queue, &state.metrics,
                        reuse);
    // Whenever the server falls idle, the allocator hands freed pages back.
    scheduler.set_on_idle(release_free_memory);
    scheduler.set_on_group_failed([life](const std::string & why) { stop_after_group_failure(why, life); });
    const bool speculative = !drafters.empty();
    scheduler.set_drafters(std::move(drafters));
    if (opts.sleep_idle_seconds > 0 && processes && processes->size() > 1) {
        SRV_WRN("--sleep-idle-seconds has no effect under mpirun: the other processes keep their shards loaded");
    } else if (opts.sleep_idle_seconds > 0) {
        scheduler.set_sleep_after(std::chrono::seconds(opts.sleep_idle_seconds));
    }
    scheduler.start();

    const ModelInfo & info = engine->info();
    state.engine = engine.get();
    state.scheduler = &scheduler;
    state.chat = chat.get();
    state.loras = loras.get();
    state.model_name = model_name(opts);
    state.n_ctx = n_ctx;
    state.n_ctx_slot = n_ctx_slot;
    state.speculative_types = speculative ? opts.speculative.type_names() : "none";
    state.created =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    state.ready = true;
    life->set_ready();

    SRV_INF(
        "llama-tp-server ready: model %s (%s, %s params), tp %d (allreduce %s%s), ctx %d (%d per slot, %s), "
        "slots %d, batch %d, threads %d, chat template %s, api key %s, listening on %s",
        state.model_name.c_str(), info.architecture.c_str(), human_count(info.n_params).c_str(), info.tp,
        engine->info().allreduce.c_str(),
        engine->options().exact_sums()  ? ", split-invariant sums"
        : engine->info().allreduce_bf16 ? ", bf16 wire"
                                        : "",
        n_ctx, n_ctx_slot, opts.engine.kv_unified ? "KV cells shared" : "KV cells per slot", opts.n_parallel,
        engine->options().n_batch, engine->options().n_threads, chat->origin().c_str(),
        opts.api_keys.empty() ? "off" : "on", urls.c_str());

    life->wait_for_stop();

    // Running requests end with 503 first, so that no HTTP worker stays
    // blocked on a channel while the server joins its threads.
    state.stopping = true;
    // A step stuck on a rank that died would hold its clients until the
    // collective's timeout: fail the group so that they get 503 now.
    if (!scheduler.stop_within(std::chrono::milliseconds(300)))
        engine->abort("the server was stopped while a step waited for another rank");
    scheduler.shutdown();
    listeners.clear();
    SRV_INF("stopped");
    return life->exit_status();
}
