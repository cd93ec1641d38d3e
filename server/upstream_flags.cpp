#include "server/upstream_flags.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

namespace llama_tp::server {

namespace {

// llama-server options that llama-tp-server honours, by their first name.
// The value is read from common_params in server_options.cpp.
const std::map<std::string, std::string> & honoured() {
    static const std::map<std::string, std::string> table = {
        {"-h", ""},
        {"--version", ""},
        {"-cl", ""},
        {"--completion-bash", ""},
        {"--list-devices", ""},
        {"--models-dir", "without -m: router mode, a llama-tp-server per model of the folder, started on demand"},
        {"--models-max", "children at once; a load beyond it stops the least recently used idle one"},
        {"--models-preset",
         "llama-server's INI of models and options ([*], load-on-startup, stop-timeout, dedup-cache-models)"},
        {"--models-autoload", "a request naming an unloaded model starts it (?autoload= overrides)"},
        {"-ngl", "all or auto: the ranks on GPUs (one each); 0: on the CPU; a part of the layers is refused"},
        {"-m", ""},
        {"-mu", "downloaded into llama-server's cache (or to -m), as llama-server"},
        {"-hf", "downloaded into llama-server's cache (LLAMA_CACHE, MODEL_ENDPOINT), as llama-server; no mmproj"},
        {"-hff", ""},
        {"-hft", ""},
        {"-dr", "downloaded from Docker Hub into llama-server's cache, as llama-server"},
        {"-a", "the first alias names the model in the API; /v1/models lists them all"},
        {"--tags", "listed with the model in /v1/models"},
        {"-c", "total KV cells; each slot gets ctx-size / parallel (without -c: fitted to memory, see README)"},
        {"-np", "-1 (auto): 4 slots"},
        {"--warmup", "one step of the BOS token at load: a model that cannot decode fails at start"},
        {"--kv-unified-per-slot", "caps each slot's context at N; without -c the cache holds slots x N cells"},
        {"--lora", "split as the matrices they change; requests may pick adapters and scales (\"lora\")"},
        {"--lora-scaled", ""},
        {"--control-vector", "added to the hidden state after each layer on every rank, as upstream"},
        {"--control-vector-scaled", ""},
        {"--control-vector-layer-range", ""},
        {"--check-tensors", "each rank checks the values it reads; an invalid one stops the load naming the tensor"},
        {"--override-kv", "read in place of the model file's values, by the weights' loader and the tokenizer"},
        {"--lora-init-without-apply", "the global scales start at 0 (POST /lora-adapters sets them)"},
        {"--swa-full", "without it sliding-window layers keep their window and a batch, as upstream's"},
        {"-kvu", "one cell pool and ggml's attention; without it each slot owns its cells (faster)"},
        {"-t", "default here: all cores (shared by the processes of an MPI launch on one host)"},
        {"-b", "default here: 512"},
        {"-n", ""},
        {"--host", ""},
        {"--port", ""},
        {"--api-key", ""},
        {"--api-key-file", ""},
        {"-to", "default here: 600"},
        {"--threads-http", ""},
        {"--chat-template", ""},
        {"--chat-template-file", ""},
        {"--jinja", "templates are always Jinja: --no-jinja has no effect"},
        {"-cb", "batching is always continuous: --no-cont-batching has no effect"},
        {"-v", ""},
        {"-lv", "4 and above: verbose"},
        {"--offline", "-hf / -mu / -dr use the cache only"},
        {"--metrics", ""},
        {"--ssl-key-file", "with --ssl-cert-file: HTTPS (cpp-httplib with OpenSSL)"},
        {"--ssl-cert-file", "with --ssl-key-file: HTTPS"},
        {"--spm-infill", ""},
        {"--embedding", "the embedding routes answer, the generation routes do not (as llama-server)"},
        {"--pooling", "none, mean (the default here; a reranker's file: rank), cls, last, rank (see --rerank)"},
        {"--rerank", "/rerank and its aliases, scored by the model's classification head (cls.output.weight)"},
        {"--embd-normalize", ""},
        {"--slot-save-path", "any --tp / -ts of the same model restores a file"},
        {"-sp", "special tokens (an end-of-turn marker) appear in the generated text"},
        {"-sps",
         "a slot is taken for its cached prefix when that is over this part of the prompt, else the least "
         "recently used one"},
        {"-cram",
         "a slot's cells kept in host memory when another prompt takes the slot, given back to a later "
         "prompt that shares more with them (default 8192 MiB, at most a quarter of the memory available after the "
         "model; -1: no limit, 0: off)"},
        {"-ctxcp",
         "per slot: a prompt's cells kept in the --cache-ram prompt cache 4 tokens before its end and where user "
         "messages open, where sliding-window layers keep only their window or linear attention a state"},
        {"-cms",
         "a user message before the last gets a context checkpoint where it opens only more than this many tokens "
         "past the slot's newest one (default 8192)"},
        {"--slots", ""},
        {"--props", ""},
        {"--api-prefix", ""},
        {"--cors-origins", ""},
        {"--reuse-port", ""},
        {"--path", "files served under the API prefix, as llama-server"},
        {"--sse-ping-interval", "requests may set sse_ping_interval"},
        {"--cache-prompt", "the default of requests that leave cache_prompt out"},
        {"-r", "stop strings of requests that give none (repeatable), as llama-server"},
        {"-e", "escapes (\\n, \\t, ...) in -r and --dry-sequence-breaker are processed (the default)"},
        {"--cache-reuse",
         "cached chunks of at least N tokens after the common prefix move to where the prompt has them; "
         "requests may set n_cache_reuse"},
        {"--spec-type",
         "draft-simple, draft-mtp and the n-gram kinds (ngram-simple, -map-k, -map-k4v, -mod, -cache); the others "
         "are ignored with a warning (server/README.md)"},
        {"--spec-draft-model", "draft-simple (also without --spec-type): the draft runs unsplit on process 0"},
        {"--spec-draft-hf", "the draft model from Hugging Face, into llama-server's cache as -hf (in place of -md)"},
        {"--spec-draft-n-max", ""},
        {"--spec-draft-n-min", ""},
        {"--spec-draft-p-min", "the most likely draft token's probability among the top 10, as upstream"},
        {"--spec-draft-type-k", ""},
        {"--spec-draft-type-v", ""},
        {"--spec-draft-threads", "the draft model's threads (default: as -t)"},
        {"--spec-draft-device", "the draft model's device (default: the first rank's, -dev)"},
        {"--spec-draft-ngl", "the draft model's -ngl (default: as -ngl)"},
        {"--spec-ngram-simple-size-n", ""},
        {"--spec-ngram-simple-size-m", ""},
        {"--spec-ngram-map-k-size-n", ""},
        {"--spec-ngram-map-k-size-m", ""},
        {"--spec-ngram-map-k-min-hits", ""},
        {"--spec-ngram-map-k4v-size-n", ""},
        {"--spec-ngram-map-k4v-size-m", ""},
        {"--spec-ngram-map-k4v-min-hits", ""},
        {"--spec-ngram-mod-n-match", ""},
        {"--spec-ngram-mod-n-min", ""},
        {"--spec-ngram-mod-n-max", ""},
        {"-lcs", "ngram-cache's static lookup cache (llama-lookup-create writes one)"},
        {"-lcd", "ngram-cache's dynamic lookup cache, read at start (not written back, as llama-server)"},
        // llama-server's model presets: the model fetched as -hf's, with the
        // preset's port, batch, slots and sampling (a later flag wins; the
        // context is fitted as without -c).
        {"--embd-gemma-default", "llama-server's preset: EmbeddingGemma, --embeddings, port 8011"},
        {"--fim-qwen-1.5b-default", "llama-server's preset: Qwen 2.5 Coder 1.5B, port 8012"},
        {"--fim-qwen-3b-default", "llama-server's preset: Qwen 2.5 Coder 3B, port 8012"},
        {"--fim-qwen-7b-default", "llama-server's preset: Qwen 2.5 Coder 7B, port 8012"},
        {"--fim-qwen-7b-spec", "llama-server's preset: Qwen 2.5 Coder 7B with the 0.5B as draft, port 8012"},
        {"--fim-qwen-14b-spec", "llama-server's preset: Qwen 2.5 Coder 14B with the 0.5B as draft, port 8012"},
        {"--fim-qwen-30b-default", "llama-server's preset: Qwen 3 Coder 30B-A3B, port 8012"},
        {"--gpt-oss-20b-default", "llama-server's preset: gpt-oss-20b, 2 slots, its sampling, port 8013"},
        {"--gpt-oss-120b-default", "llama-server's preset: gpt-oss-120b, 2 slots, its sampling, port 8013"},
        {"--vision-gemma-4b-default", "llama-server's preset: Gemma 3 4B, text only (no projector here), port 8014"},
        {"--vision-gemma-12b-default", "llama-server's preset: Gemma 3 12B, text only (no projector here), port 8014"},
        {"--spec-default", "llama-server's preset: ngram-mod speculative decoding (n-match 24, 48-64 tokens)"},
        {"--sleep-idle-seconds",
         "the model and its caches are freed after SECONDS without a request, loaded again by the next; one "
         "process only"},
        {"--cors-methods", ""},
        {"--cors-headers", ""},
        {"--cors-credentials", ""},
        {"--temp", ""},
        {"--top-k", ""},
        {"--top-p", ""},
        {"--min-p", ""},
        {"--repeat-last-n", ""},
        {"--repeat-penalty", ""},
        {"--presence-penalty", ""},
        {"--frequency-penalty", ""},
        {"-s", ""},
        {"-ctk", "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl; not f16: ggml's attention kernel"},
        {"-ctv", "as -ctk"},
        {"--reasoning-format", "none: thinking stays in content; auto, deepseek: reasoning_content"},
        {"-rea", ""},
        {"--reasoning-budget", "0: no thinking; N > 0: the end tag forced after N tokens of thinking"},
        {"--reasoning-budget-message", ""},
        {"--context-shift", "a full slot drops half its tokens after --keep and goes on generating"},
        {"--keep", "the prompt tokens a context shift keeps (-1: all)"},
        {"--reasoning-preserve", "as the template's preserve_reasoning variable"},
        {"--reasoning-effort", "the template's reasoning_effort variable; a request's reasoning_effort wins"},
        {"--skip-chat-parsing", "thinking and tool calls stay in content"},
        {"--chat-template-kwargs", ""},
        {"--prefill-assistant", ""},
        {"--samplers", ""},
        {"--sampler-seq", ""},
        {"--ignore-eos", "the default of requests that leave ignore_eos out"},
        {"--top-nsigma", ""},
        {"--xtc-probability", ""},
        {"--xtc-threshold", ""},
        {"--typical", ""},
        {"--dry-multiplier", ""},
        {"--dry-base", ""},
        {"--dry-allowed-length", ""},
        {"--dry-penalty-last-n", ""},
        {"--dry-sequence-breaker", ""},
        {"--dynatemp-range", ""},
        {"--dynatemp-exp", ""},
        {"--mirostat", ""},
        {"--mirostat-lr", ""},
        {"--mirostat-ent", ""},
        {"-l", ""},
        {"--grammar", "the default of requests that give no grammar or format"},
        {"--grammar-file", "the default of requests that give no grammar or format"},
        {"-j", "the default of requests that give no grammar or format"},
        {"-jf", "the default of requests that give no grammar or format"},
        {"--rope-scaling", "replaces the model's RoPE scaling (none, linear, yarn)"},
        {"--rope-scale", ""},
        {"--rope-freq-base", "the global layers' base; sliding-window layers keep their own"},
        {"--rope-freq-scale", "the global layers' scale; sliding-window layers keep their own"},
        {"--yarn-orig-ctx", ""},
        {"--yarn-ext-factor", ""},
        {"--yarn-attn-factor", "with YaRN extrapolation the magnitude follows the scale, as upstream"},
        {"--yarn-beta-slow", ""},
        {"--yarn-beta-fast", ""},
    };
    return table;
}

// Options accepted with no effect, and why, where the reason is particular.
const std::map<std::string, std::string> & no_effect() {
    static const std::map<std::string, std::string> table = {
        {"-sm", "the split is always tensor parallel, across the --tp ranks"},
        {"-mg", "each rank runs on its own device (-dev)"},
        {"-ot", "each rank keeps its shard in its own buffers"},
        {"-cmoe", "experts are split across the --tp ranks"},
        {"-ncmoe", "experts are split across the --tp ranks"},
        {"-fit", "the context is fitted to memory when -c is not given"},
        {"-ub", "a decode step is at most --batch-size tokens; there is no smaller physical batch"},
        {"-fa", "the attention kernel follows the KV layout (row attention per slot, ggml's with -kvu)"},
        {"-tb", "one thread pool (-t) runs prompts and generation"},
        {"-C", "threads are placed by the OS"},
        {"-Cr", "threads are placed by the OS"},
        {"--cpu-strict", "threads are placed by the OS"},
        {"--prio", "threads run at normal priority"},
        {"--poll", "ggml's pool waits the way ggml's CPU backend does"},
        {"-lm", "each rank reads its shard into its own buffers"},
        {"--numa", "NUMA placement is left to the OS (run one MPI process per socket instead)"},
        {"--no-webui", "there is no web UI"},
        {"--ui", "there is no web UI"},
        {"--spec-ngram-size-n", "removed from llama-server (refused there and here): --spec-ngram-*-size-n"},
        {"--spec-ngram-size-m", "removed from llama-server (refused there and here): --spec-ngram-*-size-m"},
        {"--spec-ngram-min-hits", "removed from llama-server (refused there and here): --spec-ngram-*-min-hits"},
        {"--spec-ngram-simple-min-hits", "llama-server's ngram-simple does not read it either"},
        {"--spec-draft-threads-batch", "the draft model runs one thread pool (-td)"},
        {"--perf", "the timings are always measured (timings in every response)"},
        {"--draft", "removed from llama-server (refused there and here): --spec-draft-n-max"},
        {"--draft-min", "removed from llama-server (refused there and here): --spec-draft-n-min"},
        {"--log-colors", "the log is plain text"},
        {"--cache-idle-slots",
         "an idle slot keeps its cells until a prompt takes it, and goes to the prompt cache then"},
    };
    return table;
}

// Flags older llama-server builds took, still found in launch scripts.
const std::vector<std::string> & retired_flags() {
    static const std::vector<std::string> names = {"--mlock", "--no-mmap", "--mmap"};
    return names;
}

}  // namespace

UpstreamFlags::UpstreamFlags() : ctx_(common_params_parser_init(params_, LLAMA_EXAMPLE_SERVER)) {
    // The parser table refers to ctx_.params; our copy must be that object.
    for (const common_arg & opt : ctx_.options) {
        if (opt.is_preset_only) continue;
        for (const char * a : opt.args) by_word_[a] = &opt;
        for (const char * a : opt.args_neg) by_word_[a] = &opt;
    }
}

const common_arg * UpstreamFlags::find(const std::string & word) const {
    std::string w = word;
    // llama-server reads --long_name as --long-name.
    if (w.rfind("--", 0) == 0) std::replace(w.begin(), w.end(), '_', '-');
    const auto it = by_word_.find(w);
    return it == by_word_.end() ? nullptr : it->second;
}

bool UpstreamFlags::is_negative(const common_arg & opt, const std::string & word) const {
    std::string w = word;
    if (w.rfind("--", 0) == 0) std::replace(w.begin(), w.end(), '_', '-');
    for (const char * a : opt.args_neg) {
        if (w == a) return true;
    }
    return false;
}

bool UpstreamFlags::takes_value(const common_arg & opt) const {
    return opt.handler_int || opt.handler_string || opt.handler_str_str;
}

void UpstreamFlags::apply(const common_arg & opt, const std::string & word, const std::string & value,
                          const std::string & value2) {
    mark_given(opt, word);
    if (support(opt).honoured) {
        run_handler(opt, params_, word, value, value2);
    } else if (takes_value(opt) && checks_value_alone(opt)) {
        // No effect here, but a value llama-server refuses is refused here
        // too: the handler checks it on a copy of the parameters.
        common_params scratch = params_;
        run_handler(opt, scratch, word, value);
    }
}

void UpstreamFlags::run_handler(const common_arg & opt, common_params & params, const std::string & word,
                                const std::string & value, const std::string & value2) const {
    if (opt.handler_void) {
        opt.handler_void(params);
    } else if (opt.handler_bool) {
        opt.handler_bool(params, !is_negative(opt, word));
    } else if (opt.handler_int) {
        char * end = nullptr;
        const long v = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || v < INT32_MIN || v > INT32_MAX) {
            throw std::invalid_argument("expected an integer, got '" + value + "'");
        }
        opt.handler_int(params, (int) v);
    } else if (opt.handler_string) {
        try {
            opt.handler_string(params, value);
        } catch (const std::exception & e) {
            // Upstream's handlers say "invalid value" or let std::stoi speak.
            std::string why = e.what();
            if (why.rfind("error: ", 0) == 0) why = why.substr(7);
            const bool bare = why == "invalid value" || why.rfind("sto", 0) == 0;
            throw std::invalid_argument("invalid value '" + value + "'" + (bare ? "" : ": " + why));
        }
    } else if (opt.handler_str_str) {
        try {
            opt.handler_str_str(params, value, value2);
        } catch (const std::exception &) {
            throw std::invalid_argument("invalid values '" + value + "' '" + value2 + "'");
        }
    }
}

// Handlers whose check depends on this machine's devices and buffer types
// (which a GPU command line names and llama-tp does not use) or that reach
// the network: a value of theirs is taken unchecked.
bool UpstreamFlags::checks_value_alone(const common_arg & opt) {
    static const char * const kMachineBound[] = {"-devd", "-mmdev", "-ot", "-otd", "--rpc"};
    for (const char * a : opt.args) {
        for (const char * m : kMachineBound) {
            if (std::string(a) == m) return false;
        }
    }
    return true;
}

void UpstreamFlags::apply_environment(const std::vector<const common_arg *> & skip) {
    for (const common_arg & opt : ctx_.options) {
        if (opt.is_preset_only || std::find(skip.begin(), skip.end(), &opt) != skip.end()) continue;
        std::string value;
        if (!opt.get_value_from_env(value)) continue;
        try {
            if (opt.handler_void) {
                if (!common_arg_utils::is_truthy(value)) continue;
                apply(opt, opt.env, "");
            } else if (opt.handler_bool) {
                if (!common_arg_utils::is_truthy(value) && !common_arg_utils::is_falsey(value)) {
                    throw std::invalid_argument("expected a boolean, got '" + value + "'");
                }
                mark_given(opt, opt.env);
                if (support(opt).honoured) opt.handler_bool(params_, common_arg_utils::is_truthy(value));
            } else {
                apply(opt, opt.env, value);
            }
        } catch (const std::exception & e) {
            throw std::invalid_argument(std::string("environment variable ") + opt.env + ": " + e.what());
        }
    }
}

bool UpstreamFlags::was_given(const std::string & first_name) const {
    for (const Given & g : given_) {
        if (primary_name(*g.opt) == first_name) return true;
    }
    return false;
}

void UpstreamFlags::mark_given(const common_arg & opt, const std::string & word) {
    for (const Given & g : given_) {
        if (g.opt == &opt) return;
    }
    given_.push_back({&opt, word});
}

std::string UpstreamFlags::primary_name(const common_arg & opt) {
    return opt.args.empty() ? std::string() : std::string(opt.args[0]);
}

FlagSupport UpstreamFlags::support(const common_arg & opt) {
    const std::string name = primary_name(opt);
    const auto h = honoured().find(name);
    if (h != honoured().end()) return {true, h->second};
    const auto n = no_effect().find(name);
    if (n != no_effect().end()) return {false, n->second};
    return {false, "not implemented by llama-tp-server"};
}

const std::vector<std::string> & UpstreamFlags::retired() {
    return retired_flags();
}

}  // namespace llama_tp::server
