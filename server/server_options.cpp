#include "server/server_options.h"

#include "runtime/text/tokenizer.h"
#include "server/speculative/ngram_drafter.h"
#include "server/api/request.h"
#include "server/upstream_flags.h"

#include "ggml-backend.h"
#include "sampling.h"
#include "speculative.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>

namespace llama_tp::server {

namespace {

// A flag of llama-tp's own (tensor parallelism, limits), or one whose meaning
// here is llama-tp's (-ts: a share per rank). These are looked up before
// llama-server's table.
struct Flag {
    std::vector<std::string> names;
    std::string value_name;  // empty: the flag takes no value
    std::string env;         // LLAMA_ARG_* variable; empty: none
    std::string help;
    std::function<void(ServerOptions &, const std::string & flag, const std::string & value)> apply;
};

long long parse_int(const std::string & flag, const std::string & v, long long lo, long long hi) {
    errno = 0;
    char * end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno == ERANGE) {
        throw UsageError(flag + ": expected an integer, got '" + v + "'");
    }
    if (x < lo || x > hi) {
        throw UsageError(flag + ": " + v + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return x;
}

float parse_float(const std::string & flag, const std::string & v, double lo, double hi) {
    errno = 0;
    char * end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x)) {
        throw UsageError(flag + ": expected a number, got '" + v + "'");
    }
    if (x < lo || x > hi) {
        std::ostringstream ss;
        ss << flag << ": " << v << " is out of range [" << lo << ", " << hi << "]";
        throw UsageError(ss.str());
    }
    return (float) x;
}

std::vector<std::string> split(const std::string & s, char sep) {
    std::vector<std::string> out;
    std::string cur;
    std::istringstream ss(s);
    while (std::getline(ss, cur, sep)) {
        out.push_back(cur);
    }
    return out;
}

std::string trim(const std::string & s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) {
        return "";
    }
    const auto e = s.find_last_not_of(" \t\r\n");
    return s.substr(b, e - b + 1);
}

// libcommon's messages start with "error: "; ours say it once.
std::string without_error_prefix(const std::string & what) {
    std::string w = trim(what);
    while (w.rfind("error: ", 0) == 0) w = trim(w.substr(7));
    return w;
}

const std::vector<Flag> & own_flags() {
    static const std::vector<Flag> table = {
        {{"-h", "--help", "--usage"}, "", "", "show this help and exit", nullptr},
        {{"--version"}, "", "", "show this build and the llama.cpp it is built on, and exit", nullptr},
        {{"--flag-support"},
         "",
         "",
         "print, as a Markdown table, what llama-tp-server does with every llama-server flag, and exit",
         nullptr},
        {{"--tp"},
         "N",
         "LLAMA_ARG_TP",
         "tensor-parallel ranks in this process (default: 1); under mpirun, ranks per process",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.engine.tp = (int32_t) parse_int(f, v, 1, 1024);
         }},
        {{"-ts", "--tensor-split"},
         "A,B,...",
         "LLAMA_ARG_TENSOR_SPLIT",
         "share of the model per rank with --tp (default: even); without --tp no effect, as for llama-server "
         "on one device",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.engine.tensor_split.clear();
             for (const auto & part : split(v, ',')) {
                 o.engine.tensor_split.push_back(parse_float(f, trim(part), 0.0, 1e9));
             }
             if (o.engine.tensor_split.empty()) throw UsageError(f + ": expected a comma-separated list of numbers");
         }},
        {{"-dev", "--device"},
         "D[,D..]",
         "LLAMA_ARG_DEVICE",
         "the device of each rank in this process, or one for all (none: the CPU; default: one GPU per rank "
         "where the build has GPUs, else the CPU; --list-devices shows them)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             try {
                 o.engine.devices.names = parse_device_names(v);
             } catch (const Error & e) {
                 throw UsageError(f + ": " + e.what());
             }
         }},
        {{"--model-path-rank"},
         "R=PATH",
         "",
         "under mpirun: process R reads the model at PATH (where machines keep it elsewhere); repeatable",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             const auto eq = v.find('=');
             if (eq == std::string::npos || eq + 1 == v.size())
                 throw UsageError(f + ": expected RANK=PATH, not '" + v + "'");
             o.model_path_of_process[(int) parse_int(f, v.substr(0, eq), 0, 1 << 20)] = v.substr(eq + 1);
         }},
        {{"--allreduce"},
         "ENGINE",
         "LLAMA_ARG_ALLREDUCE",
         "AllReduce engine for --tp > 1 (default: auto; the engine validates the name)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             if (v.empty()) throw UsageError(f + ": empty engine name");
             o.engine.allreduce = v;
         }},
        {{"--bf16-wire"},
         "",
         "LLAMA_ARG_BF16_WIRE",
         "BF16 on the AllReduce wire for the layers' partial sums (for links slower than memory; "
         "about 2^-9 relative rounding per sum)",
         [](ServerOptions & o, const std::string & f, const std::string &) {
             if (o.engine.allreduce_wire == WireType::F32) throw UsageError(f + " and --f32-wire exclude each other");
             o.engine.allreduce_wire = WireType::BF16;
         }},
        {{"--f32-wire"},
         "",
         "LLAMA_ARG_F32_WIRE",
         "F32 on the AllReduce wire for every float sum (the default in host memory; between GPUs the engines "
         "take BF16 from a size on)",
         [](ServerOptions & o, const std::string & f, const std::string &) {
             if (o.engine.allreduce_wire == WireType::BF16) throw UsageError(f + " and --bf16-wire exclude each other");
             o.engine.allreduce_wire = WireType::F32;
         }},
        {{"--split-invariant"},
         "",
         "LLAMA_ARG_SPLIT_INVARIANT",
         "logits that do not depend on --tp / -ts: row-parallel products summed exactly on a reduction grid "
         "fixed by the model (default for dense models whose attn_output and ffn_down are q8_0, without "
         "--bf16-wire)",
         [](ServerOptions & o, const std::string &, const std::string &) { o.engine.split_invariant = true; }},
        {{"--no-split-invariant"},
         "",
         "LLAMA_ARG_NO_SPLIT_INVARIANT",
         "ggml's float sums instead: upstream's numbers on one device, logits that move with --tp / -ts",
         [](ServerOptions & o, const std::string &, const std::string &) { o.engine.split_invariant = false; }},
        {{"--max-body-size"},
         "N",
         "LLAMA_ARG_MAX_BODY_SIZE",
         "largest request body in bytes; larger ones get 413 (default: 8388608)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.max_body_size = (size_t) parse_int(f, v, 1, 1LL << 40);
         }},
        {{"--log-disable"},
         "",
         "",
         "log nothing to stderr (a --log-file still gets every line)",
         [](ServerOptions & o, const std::string &, const std::string &) { o.log.disabled = true; }},
        {{"--log-file"},
         "FNAME",
         "LLAMA_ARG_LOG_FILE",
         "log to this file too (appended)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             if (v.empty()) throw UsageError(f + ": empty file name");
             o.log.file = v;
         }},
        {{"--log-timestamps", "--no-log-timestamps"},
         "",
         "LLAMA_ARG_LOG_TIMESTAMPS",
         "a time at the start of every log line (default: on)",
         [](ServerOptions & o, const std::string & f, const std::string &) {
             o.log.timestamps = f.find("--no-") != 0;
         }},
        {{"--log-prefix", "--no-log-prefix"},
         "",
         "LLAMA_ARG_LOG_PREFIX",
         "the level's letter (D, I, W, E) in every log line (default: on)",
         [](ServerOptions & o, const std::string & f, const std::string &) { o.log.prefix = f.find("--no-") != 0; }},
        {{"--max-queue"},
         "N",
         "LLAMA_ARG_MAX_QUEUE",
         "requests that may wait while all slots are busy; more get 503 (default: 64)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.max_queue = (int32_t) parse_int(f, v, 0, 1 << 20);
         }},
    };
    return table;
}

const Flag * find_own_flag(const std::string & name) {
    for (const auto & f : own_flags()) {
        for (const auto & n : f.names) {
            if (n == name) return &f;
        }
    }
    return nullptr;
}

bool is_retired(const std::string & word) {
    for (const auto & r : UpstreamFlags::retired()) {
        if (r == word) return true;
    }
    return false;
}

size_t edit_distance(const std::string & a, const std::string & b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

std::string nearest_flag(const std::string & word, const UpstreamFlags & upstream) {
    std::string best;
    size_t best_d = SIZE_MAX;
    auto consider = [&](const std::string & name) {
        const size_t d = edit_distance(word, name);
        if (d < best_d) {
            best_d = d;
            best = name;
        }
    };
    for (const auto & f : own_flags()) {
        for (const auto & n : f.names) consider(n);
    }
    for (const common_arg & opt : upstream.options()) {
        for (const char * a : opt.args) consider(a);
        for (const char * a : opt.args_neg) consider(a);
    }
    return best_d <= std::max<size_t>(2, word.size() / 3) ? best : std::string();
}

// --rope-* and --yarn-*: libcommon's unset values are the engine's.
RopeOverrides rope_overrides(const common_params & p) {
    RopeOverrides r;
    switch (p.rope_scaling_type) {
        case LLAMA_ROPE_SCALING_TYPE_NONE:
            r.scaling = RopeScaling::None;
            break;
        case LLAMA_ROPE_SCALING_TYPE_LINEAR:
            r.scaling = RopeScaling::Linear;
            break;
        case LLAMA_ROPE_SCALING_TYPE_YARN:
            r.scaling = RopeScaling::Yarn;
            break;
        default:
            break;  // unspecified: the model's (the flag takes none, linear or yarn only)
    }
    r.freq_base = p.rope_freq_base;
    r.freq_scale = p.rope_freq_scale;
    r.yarn_orig_ctx = p.yarn_orig_ctx;
    r.yarn_ext_factor = p.yarn_ext_factor;
    r.yarn_attn_factor = p.yarn_attn_factor;
    r.yarn_beta_fast = p.yarn_beta_fast;
    r.yarn_beta_slow = p.yarn_beta_slow;
    return r;
}

// The llama-server options llama-tp-server honours, from libcommon's params.
// llama-server's speculative settings: the kinds implemented here are read,
// any other is ignored with a warning. A draft model given is used (as
// draft-simple), with or without --spec-type, as llama-server did before
// --spec-type existed.
void read_speculative(const UpstreamFlags & up, ServerOptions & o) {
    const common_params_speculative & s = up.params().speculative;
    SpeculativeOptions & spec = o.speculative;
    bool draft_simple = false, ngram = false;
    for (common_speculative_type t : s.types) {
        if (t == COMMON_SPECULATIVE_TYPE_NONE) continue;
        if (NgramDrafter::takes(t)) {
            ngram = true;
        } else if (t == COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE) {
            draft_simple = true;
        } else if (t == COMMON_SPECULATIVE_TYPE_DRAFT_MTP) {
            spec.mtp = true;
        } else {
            o.warnings.push_back("--spec-type " + common_speculative_type_to_str(t) +
                                 " has no effect in llama-tp-server: not implemented (draft-simple, draft-mtp and "
                                 "the n-gram kinds are)");
        }
    }
    if (ngram) spec.ngram = std::make_shared<const common_params_speculative>(s);
    spec.draft_model = s.draft.mparams.path;
    spec.draft_hf_repo = s.draft.mparams.hf_repo;
    spec.draft_hf_file = s.draft.mparams.hf_file;
    if (draft_simple && !spec.has_draft_model()) {
        throw UsageError("--spec-type draft-simple: no draft model (-md FILE or -hfd REPO)");
    }
    // llama-server also reads a prediction layer shipped in a file of its own
    // from -md; llama-tp reads it from the model's file only.
    if (spec.mtp && spec.has_draft_model() && !draft_simple) {
        throw UsageError(
            "--spec-type draft-mtp reads the prediction layer from the model's own file; a separate head file (-md) "
            "is not supported (name draft-simple too if that file is a draft model)");
    }
    spec.draft_n_max = s.draft.n_max;
    spec.draft_n_min = s.draft.n_min;
    spec.draft_p_min = s.draft.p_min;
    spec.draft_kv.k = s.draft.cache_type_k;
    spec.draft_kv.v = s.draft.cache_type_v;
    spec.draft_threads = up.was_given("--spec-draft-threads") ? s.draft.cpuparams.n_threads : 0;
    spec.draft_devices = o.engine.devices;
    if (spec.draft_devices.names.size() > 1) spec.draft_devices.names.resize(1);  // the first rank's
    if (up.was_given("--spec-draft-device")) {
        spec.draft_devices.names.clear();
        for (ggml_backend_dev_t d : s.draft.devices) spec.draft_devices.names.push_back(ggml_backend_dev_name(d));
        if (spec.draft_devices.names.empty()) spec.draft_devices.names.push_back("none");
    }
    if (up.was_given("--spec-draft-ngl")) spec.draft_devices.gpu_layers = std::max(-2, s.draft.n_gpu_layers);
}

void take_upstream_values(const UpstreamFlags & up, ServerOptions & o) {
    const common_params & p = up.params();
    o.engine.model_path = p.model.path;
    o.model_source.hf_repo = p.model.hf_repo;
    o.model_source.hf_file = p.model.hf_file;
    o.model_source.hf_token = p.hf_token;
    o.model_source.url = p.model.url;
    o.model_source.docker_repo = p.model.docker_repo;
    o.model_source.path = p.model.path;
    o.model_source.offline = p.offline;
    o.engine.n_ctx = p.n_ctx;
    o.models_dir = p.models_dir;
    o.models_preset = p.models_preset;
    o.models_max = p.models_max;
    o.models_autoload = p.models_autoload;
    o.context_given = up.was_given("-c");
    o.slot_context_cap = std::max(0, p.kv_unified_per_slot);
    o.engine.n_batch = p.n_batch;
    o.engine.n_threads = p.cpuparams.n_threads > 0 ? p.cpuparams.n_threads : 0;
    o.engine.kv_unified = p.kv_unified;
    o.engine.swa_full = p.swa_full;
    o.engine.devices.gpu_layers = std::max(-2, p.n_gpu_layers);
    for (const common_adapter_lora_info & l : p.lora_adapters) o.engine.loras.push_back({l.path, l.scale});
    o.lora_init_without_apply = p.lora_init_without_apply;
    for (const common_control_vector_load_info & c : p.control_vectors) {
        o.engine.control_vectors.push_back({c.fname, c.strength});
    }
    o.engine.control_range = {p.control_vector_layer_start, p.control_vector_layer_end};
    o.engine.check_tensors = p.check_tensors;
    o.engine.metadata_overrides = from_llama_overrides(p.kv_overrides);
    o.engine.kv_types.k = p.cache_type_k;
    o.engine.kv_types.v = p.cache_type_v;
    o.engine.rope = rope_overrides(p);
    o.n_parallel = p.n_parallel;
    o.n_predict = p.n_predict;
    o.aliases.assign(p.model_alias.begin(), p.model_alias.end());
    o.tags.assign(p.model_tags.begin(), p.model_tags.end());
    o.reuse_port = p.reuse_port;
    o.static_path = p.public_path;
    o.hosts = p.hostnames;
    o.port = p.port;
    o.api_keys = p.api_keys;
    o.api_prefix = p.api_prefix;
    while (!o.api_prefix.empty() && o.api_prefix.back() == '/') o.api_prefix.pop_back();
    if (!o.api_prefix.empty() && o.api_prefix.front() != '/') o.api_prefix = "/" + o.api_prefix;
    o.endpoint_metrics = p.endpoint_metrics;
    o.endpoint_slots = p.endpoint_slots;
    o.endpoint_props = p.endpoint_props;
    o.cors_origins = p.cors_origins;
    o.cors_methods = p.cors_methods;
    o.cors_headers = p.cors_headers;
    o.cors_credentials = p.cors_credentials;
    o.timeout_s = p.timeout_read;
    o.http_threads = p.n_threads_http;
    o.chat_template = p.chat_template;
    o.slot_save_path = p.slot_save_path;  // the handler checked it is a directory
    o.cache_ram_mib = p.cache_ram_mib;
    o.cache_ram_given = up.was_given("-cram");
    o.ctx_checkpoints = std::max(0, p.n_ctx_checkpoints);
    o.checkpoint_min_step = std::max(0, p.checkpoint_min_step);
    o.slot_prompt_similarity = p.slot_prompt_similarity;
    o.special = p.special;
    o.ssl_key_file = p.ssl_file_key;
    o.ssl_cert_file = p.ssl_file_cert;
    o.reasoning_format = (int) p.reasoning_format;
    o.enable_reasoning = p.enable_reasoning;
    o.prefill_assistant = p.prefill_assistant;
    o.skip_chat_parsing = p.force_pure_content_parser;
    o.template_kwargs = p.default_template_kwargs;
    if (p.sampling.reasoning_budget_tokens == 0) {
        o.enable_reasoning = 0;  // no thinking at all
    } else {
        o.reasoning_budget = p.sampling.reasoning_budget_tokens;
    }
    o.reasoning_budget_message = p.sampling.reasoning_budget_message;
    o.sleep_idle_seconds = p.sleep_idle_seconds;
    o.warmup = p.warmup;
    o.context_shift = p.ctx_shift;
    o.n_keep = p.n_keep;
    o.verbose = p.verbosity >= 4;
    if (!p.use_jinja) o.warnings.push_back("--no-jinja has no effect: chat templates are always rendered with Jinja");
    if (!p.cont_batching) o.warnings.push_back("--no-cont-batching has no effect: batching is always continuous");

    const common_params_sampling & s = p.sampling;
    SamplingParams & d = o.requests.sampling;
    d.temperature = s.temp;
    d.top_k = std::max(0, s.top_k);
    d.top_p = s.top_p;
    d.min_p = s.min_p;
    d.penalty_last_n = s.penalty_last_n;
    d.repeat_penalty = s.penalty_repeat;
    d.presence_penalty = s.penalty_present;
    d.frequency_penalty = s.penalty_freq;
    d.seed = s.seed;
    d.typical_p = s.typ_p;
    d.top_n_sigma = s.top_n_sigma;
    d.dynatemp_range = s.dynatemp_range;
    d.dynatemp_exponent = s.dynatemp_exponent;
    d.xtc_probability = s.xtc_probability;
    d.xtc_threshold = s.xtc_threshold;
    d.dry_multiplier = s.dry_multiplier;
    d.dry_base = s.dry_base;
    d.dry_allowed_length = s.dry_allowed_length;
    d.dry_penalty_last_n = s.dry_penalty_last_n;
    d.dry_sequence_breakers = s.dry_sequence_breakers;
    if (p.escape) {
        for (std::string & b : d.dry_sequence_breakers) string_process_escapes(b);
    }
    d.mirostat = s.mirostat;
    d.mirostat_tau = s.mirostat_tau;
    d.mirostat_eta = s.mirostat_eta;
    d.min_keep = s.min_keep;
    d.grammar = s.grammar.grammar;
    for (const llama_logit_bias & b : s.logit_bias) d.logit_bias.emplace_back(b.token, b.bias);
    o.requests.ignore_eos = s.ignore_eos;
    o.requests.cache_prompt = p.cache_prompt;
    o.requests.n_cache_reuse = std::max(0, p.n_cache_reuse);
    o.requests.stop = p.antiprompt;
    // As llama-server: "\\n" and the like in -r and --dry-sequence-breaker are escapes, unless --no-escape.
    if (p.escape) {
        for (std::string & s : o.requests.stop) string_process_escapes(s);
    }
    o.requests.sse_ping_interval_s = p.sse_ping_interval;
    o.spm_infill = p.spm_infill;
    o.embeddings = p.embedding;
    o.engine.embeddings = p.embedding;
    o.embd_normalize = p.embd_normalize;
    switch (p.pooling_type) {
        case LLAMA_POOLING_TYPE_NONE:
            o.pooling = Pooling::None;
            break;
        case LLAMA_POOLING_TYPE_CLS:
            o.pooling = Pooling::Cls;
            break;
        case LLAMA_POOLING_TYPE_LAST:
            o.pooling = Pooling::Last;
            break;
        case LLAMA_POOLING_TYPE_RANK:
            o.pooling = Pooling::Rank;
            break;
        case LLAMA_POOLING_TYPE_MEAN:
            o.pooling = Pooling::Mean;
            break;
        default:
            o.pooling = Pooling::Mean;
            o.pooling_from_model = true;
    }
    d.order.clear();
    for (common_sampler_type t : s.samplers) {
        json name = common_sampler_type_to_str(t);
        try {
            d.order.push_back(sampler_order(json::array({name}), "--samplers")[0]);
        } catch (const std::exception &) {
            o.warnings.push_back("--samplers: " + name.get<std::string>() + " has no effect in llama-tp-server");
        }
    }
}

void check_ranges(const ServerOptions & o) {
    auto in = [](const char * flag, double v, double lo, double hi) {
        if (!(v >= lo && v <= hi)) {
            std::ostringstream ss;
            ss << flag << ": " << v << " is out of range [" << lo << ", " << hi << "]";
            throw UsageError(ss.str());
        }
    };
    in("--port", o.port, 0, 65535);
    in("--ctx-size", o.engine.n_ctx, 0, 1 << 24);
    if (o.n_parallel != -1) in("--parallel", o.n_parallel, 1, 4096);
    in("--batch-size", o.engine.n_batch, 1, 1 << 20);
    in("--n-predict", o.n_predict, -1, 1 << 30);
    in("--timeout", o.timeout_s, 1, 1 << 24);
    in("--threads-http", o.http_threads, -1, 4096);
    in("--temp", o.requests.sampling.temperature, 0.0, 1e6);
    in("--top-p", o.requests.sampling.top_p, 0.0, 1.0);
    in("--min-p", o.requests.sampling.min_p, 0.0, 1.0);
    in("--repeat-last-n", o.requests.sampling.penalty_last_n, -1, 1 << 30);
    in("--repeat-penalty", o.requests.sampling.repeat_penalty, 0.0, 1e6);
    in("--presence-penalty", o.requests.sampling.presence_penalty, -2.0, 2.0);
    in("--frequency-penalty", o.requests.sampling.frequency_penalty, -2.0, 2.0);
    in("--spec-draft-n-min", o.speculative.draft_n_min, 0, 1 << 20);
    in("--spec-draft-p-min", o.speculative.draft_p_min, 0.0, 1.0);
    if (o.hosts.empty()) throw UsageError("--host: no address");
    for (const auto & k : o.api_keys) {
        if (trim(k).empty()) throw UsageError("--api-key: empty key");
    }
}

// One line per option given that has no effect here.
void warn_about_no_effect(const UpstreamFlags & up, ServerOptions & o) {
    for (const UpstreamFlags::Given & g : up.given()) {
        const FlagSupport s = UpstreamFlags::support(*g.opt);
        if (s.honoured) continue;
        o.warnings.push_back(g.word + " has no effect in llama-tp-server: " + s.note);
    }
}

// Own flags from their LLAMA_ARG_* variables, before the command line.
void apply_own_environment(ServerOptions & o, const std::vector<std::string> & on_command_line) {
    for (const auto & f : own_flags()) {
        if (f.env.empty() || !f.apply) continue;
        if (std::find(on_command_line.begin(), on_command_line.end(), f.names.front()) != on_command_line.end()) {
            continue;
        }
        const char * v = std::getenv(f.env.c_str());
        if (v == nullptr) continue;
        if (f.value_name.empty()) {
            if (!common_arg_utils::is_truthy(v)) continue;
            f.apply(o, f.env, "");
        } else {
            f.apply(o, f.env, v);
        }
    }
}

struct Word {
    std::string name;
    std::string value;
    bool has_inline_value = false;
};

Word split_word(const std::string & arg) {
    Word w{arg, "", false};
    if (arg.rfind("--", 0) == 0) {
        const auto eq = arg.find('=');
        if (eq != std::string::npos) {
            w.name = arg.substr(0, eq);
            w.value = arg.substr(eq + 1);
            w.has_inline_value = true;
        }
    }
    return w;
}

}  // namespace

ServerOptions parse_server_options(int argc, char ** argv, ParseOutcome & outcome) {
    ServerOptions o;
    o.arguments.assign(argv + 1, argv + argc);
    outcome = ParseOutcome::Serve;
    UpstreamFlags up;
    // llama-tp's defaults where they differ from llama-server's.
    up.params().n_batch = 512;
    up.params().cpuparams.n_threads = 0;
    up.params().timeout_read = up.params().timeout_write = 600;

    struct Pending {
        const Flag * own;
        const common_arg * upstream;
        std::string name;
        std::string value;
        std::string value2;  // the few flags that take two
    };
    std::vector<Pending> pending;
    std::vector<std::string> own_given;
    std::vector<const common_arg *> upstream_given;
    for (int i = 1; i < argc; i++) {
        Word w = split_word(argv[i]);
        const Flag * own = find_own_flag(w.name);
        const common_arg * opt = own ? nullptr : up.find(w.name);
        if (own == nullptr && opt == nullptr) {
            if (is_retired(w.name)) {
                o.warnings.push_back(w.name + " has no effect in llama-tp-server: llama-server no longer takes it");
                continue;
            }
            const std::string near = nearest_flag(w.name, up);
            throw UsageError("unknown argument: " + w.name + (near.empty() ? "" : " (did you mean " + near + "?)") +
                             " (see --help)");
        }
        if (own && own->names.front() == "-h") {
            outcome = ParseOutcome::Help;
            return o;
        }
        if (own && own->names.front() == "--version") {
            outcome = ParseOutcome::Version;
            return o;
        }
        if (own && own->names.front() == "--flag-support") {
            outcome = ParseOutcome::FlagSupport;
            return o;
        }
        const bool wants_value = own ? !own->value_name.empty() : up.takes_value(*opt);
        if (!wants_value && w.has_inline_value) throw UsageError(w.name + " takes no value");
        if (wants_value && !w.has_inline_value) {
            if (i + 1 >= argc) throw UsageError(w.name + ": missing value");
            w.value = argv[++i];
        }
        std::string value2;
        if (opt && UpstreamFlags::takes_two_values(*opt)) {
            if (i + 1 >= argc) throw UsageError(w.name + ": missing second value");
            value2 = argv[++i];
        }
        if (own) {
            own_given.push_back(own->names.front());
        } else {
            upstream_given.push_back(opt);
        }
        pending.push_back({own, opt, w.name, w.value, value2});
    }

    // The environment first, so that the command line wins. llama-server's
    // options that our own flags stand in for read no variable of theirs.
    std::vector<const common_arg *> skip_env = upstream_given;
    for (const auto & f : own_flags()) {
        for (const auto & n : f.names) {
            if (const common_arg * shadowed = up.find(n)) skip_env.push_back(shadowed);
        }
    }
    try {
        up.apply_environment(skip_env);
    } catch (const std::exception & e) {
        throw UsageError(without_error_prefix(e.what()));
    }
    apply_own_environment(o, own_given);
    for (const Pending & p : pending) {
        if (p.upstream == nullptr) continue;
        try {
            up.apply(*p.upstream, p.name, p.value, p.value2);
        } catch (const std::exception & e) {
            throw UsageError(p.name + ": " + without_error_prefix(e.what()));
        }
    }
    take_upstream_values(up, o);
    for (const Pending & p : pending) {
        if (p.own) p.own->apply(o, p.name, p.value);
    }
    read_speculative(up, o);  // after -dev, which the draft follows
    o.engine.shares_cores = o.speculative.has_draft_model() || o.speculative.mtp;
    // A recurrent model then keeps each slot's state from before its draft.
    o.engine.draft_states = o.speculative.enabled() && !o.engine.embeddings;
    o.engine.keep_hidden = o.speculative.mtp && !o.engine.embeddings;
    warn_about_no_effect(up, o);
    check_ranges(o);

    const bool has_model = !o.engine.model_path.empty() || o.model_source.remote();
    if (has_model) o.models_dir.clear(), o.models_preset.clear();  // a model of its own: not a router
    // No model at all: a router over llama-server's cache, empty or not, as llama-server starts.
    if (!has_model && !o.router()) o.models_from_cache = true;
    const bool tp_given = std::find(own_given.begin(), own_given.end(), "--tp") != own_given.end() ||
                          std::getenv("LLAMA_ARG_TP") != nullptr;
    if (!o.engine.tensor_split.empty() && !tp_given) {
        // llama-server's meaning: shares of GPUs, which one process here does not have.
        std::string word = "-ts";
        for (const Pending & p : pending) {
            if (p.own && p.own->names.front() == "-ts") word = p.name;
        }
        o.warnings.push_back(word +
                             " has no effect in llama-tp-server without --tp (with --tp N it gives each of the "
                             "N ranks its share)");
        o.engine.tensor_split.clear();
    }
    if (!o.engine.tensor_split.empty() && (int) o.engine.tensor_split.size() != o.engine.tp) {
        throw UsageError("--tensor-split has " + std::to_string(o.engine.tensor_split.size()) +
                         " entries but --tp is " + std::to_string(o.engine.tp));
    }
    o.slots_automatic = o.n_parallel == -1;
    if (o.slots_automatic) o.n_parallel = kAutoSlots;
    if (o.engine.n_ctx > 0 && o.engine.n_ctx < o.n_parallel) {
        throw UsageError("--ctx-size " + std::to_string(o.engine.n_ctx) + " is smaller than --parallel " +
                         std::to_string(o.n_parallel) + ": every slot needs room");
    }
    o.engine.n_seq_max = o.n_parallel;
    return o;
}

void print_usage(const char * argv0) {
    std::printf("usage: %s -m MODEL.gguf [options]\n\n", argv0);
    std::printf(
        "An OpenAI-compatible server for llama-tp. It takes llama-server's command line: every flag and\n"
        "LLAMA_ARG_* variable of llama-server is accepted (flag beats environment); those without effect\n"
        "here say so in one warning line each (--flag-support lists them all).\n\n"
        "----- llama-tp -----\n\n");
    for (const auto & f : own_flags()) {
        std::string names;
        for (const auto & n : f.names) names += (names.empty() ? "" : ", ") + n;
        if (!f.value_name.empty()) names += " " + f.value_name;
        std::printf("%-39s %s%s\n", names.c_str(), f.help.c_str(),
                    f.env.empty() ? "" : ("\n" + std::string(40, ' ') + "(env: " + f.env + ")").c_str());
    }
    std::printf("\n----- llama-server flags honoured here -----\n\n");
    UpstreamFlags up;
    for (const common_arg & opt : up.options()) {
        if (opt.is_preset_only || find_own_flag(UpstreamFlags::primary_name(opt))) continue;
        const FlagSupport s = UpstreamFlags::support(opt);
        if (!s.honoured) continue;
        std::printf("%s", opt.to_string().c_str());
        if (!s.note.empty()) std::printf("%40s(here: %s)\n", "", s.note.c_str());
    }
    std::printf(
        "\nendpoints: OpenAI (/v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings,\n"
        "           /v1/models), Anthropic (/v1/messages) and llama-server's own (/completion, /infill,\n"
        "           /tokenize, /detokenize, /apply-template, /props, /slots, /metrics, /health);\n"
        "           server/README.md has each one's fields\n");
}

void print_flag_support() {
    std::printf("| flag | environment | here |\n| --- | --- | --- |\n");
    for (const auto & f : own_flags()) {
        if (!f.apply) continue;
        std::string names;
        for (const auto & n : f.names) names += (names.empty() ? "`" : "`, `") + n;
        std::printf("| %s` | %s | llama-tp: %s |\n", names.c_str(), f.env.empty() ? "" : ("`" + f.env + "`").c_str(),
                    f.help.c_str());
    }
    UpstreamFlags up;
    for (const common_arg & opt : up.options()) {
        if (opt.is_preset_only || find_own_flag(UpstreamFlags::primary_name(opt))) continue;
        std::string names;
        for (const char * a : opt.args) names += std::string(names.empty() ? "`" : "`, `") + a;
        for (const char * a : opt.args_neg) names += std::string("`, `") + a;
        const FlagSupport s = UpstreamFlags::support(opt);
        std::string note = s.honoured ? "honoured" : "no effect";
        if (!s.note.empty()) note += ": " + s.note;
        std::printf("| %s` | %s | %s |\n", names.c_str(), opt.env ? ("`" + std::string(opt.env) + "`").c_str() : "",
                    note.c_str());
    }
    for (const auto & r : UpstreamFlags::retired()) {
        std::printf("| `%s` | | no effect: llama-server no longer takes it |\n", r.c_str());
    }
}

}  // namespace llama_tp::server
