#include "server/server_options.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

namespace llama_tp::server {

namespace {

struct Flag {
    std::vector<std::string> names;
    std::string value_name;  // empty: the flag takes no value
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

std::string read_file(const std::string & flag, const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        throw UsageError(flag + ": cannot read '" + path + "'");
    }
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
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

const std::vector<Flag> & flags() {
    static const std::vector<Flag> table = {
        {{"-h", "--help"}, "", "show this help and exit", nullptr},
        {{"-m", "--model"},
         "FNAME",
         "model file (GGUF); required",
         [](ServerOptions & o, const std::string &, const std::string & v) { o.engine.model_path = v; }},
        {{"-a", "--alias"},
         "NAME",
         "model name reported by the API (default: the model file name)",
         [](ServerOptions & o, const std::string &, const std::string & v) { o.alias = v; }},
        {{"--host"},
         "HOST",
         "address to listen on (default: 127.0.0.1)",
         [](ServerOptions & o, const std::string &, const std::string & v) { o.host = v; }},
        {{"--port"},
         "PORT",
         "port to listen on (default: 8080)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.port = (int) parse_int(f, v, 0, 65535);
         }},
        {{"-c", "--ctx-size"},
         "N",
         "KV cache size in tokens, shared by all slots (default: 0 = the model's training context)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.engine.n_ctx = (int32_t) parse_int(f, v, 0, 1 << 24);
         }},
        {{"-np", "--parallel"},
         "N",
         "number of slots: requests decoded together (default: 1); each gets ctx-size/N tokens",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.n_parallel = (int32_t) parse_int(f, v, 1, 4096);
         }},
        {{"-kvu", "--kv-unified"},
         "",
         "one KV cell pool for all slots and ggml's attention kernel, as upstream (default: each slot owns "
         "ctx-size/N cells and attends over those only through llama-tp's row attention, which is faster)",
         [](ServerOptions & o, const std::string &, const std::string &) { o.engine.kv_unified = true; }},
        {{"-t", "--threads"},
         "N",
         "CPU threads (default: 0 = all cores)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.engine.n_threads = (int32_t) parse_int(f, v, -1, 4096);
             if (o.engine.n_threads < 0) o.engine.n_threads = 0;
         }},
        {{"-b", "--batch-size"},
         "N",
         "most tokens in one decode step (default: 512)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.engine.n_batch = (int32_t) parse_int(f, v, 1, 1 << 20);
         }},
        {{"-n", "--n-predict"},
         "N",
         "default cap on generated tokens per request (default: -1 = until the context is full)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.n_predict = (int32_t) parse_int(f, v, -1, 1 << 30);
         }},
        {{"--api-key"},
         "KEY",
         "require this API key (Authorization: Bearer KEY); comma-separated for several",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             for (const auto & k : split(v, ',')) {
                 const auto key = trim(k);
                 if (key.empty()) throw UsageError(f + ": empty key");
                 o.api_keys.push_back(key);
             }
         }},
        {{"--api-key-file"},
         "FNAME",
         "file with API keys, one per line",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             const auto text = read_file(f, v);
             size_t n = 0;
             for (const auto & line : split(text, '\n')) {
                 const auto key = trim(line);
                 if (!key.empty() && key[0] != '#') {
                     o.api_keys.push_back(key);
                     n++;
                 }
             }
             if (n == 0) throw UsageError(f + ": no keys in '" + v + "'");
         }},
        {{"--chat-template"},
         "JINJA",
         "chat template: Jinja source or a built-in name such as chatml (default: the model's own, else chatml)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             if (v.empty()) throw UsageError(f + ": empty template");
             o.chat_template = v;
         }},
        {{"--chat-template-file"},
         "FNAME",
         "read the chat template (Jinja) from a file",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.chat_template = read_file(f, v);
             if (trim(o.chat_template).empty()) throw UsageError(f + ": '" + v + "' is empty");
         }},
        {{"--tp"},
         "N",
         "tensor-parallel ranks (default: 1)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.engine.tp = (int32_t) parse_int(f, v, 1, 1024);
         }},
        {{"-ts", "--tensor-split"},
         "A,B,...",
         "share of the model per rank (default: even)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.engine.tensor_split.clear();
             for (const auto & part : split(v, ',')) {
                 o.engine.tensor_split.push_back(parse_float(f, trim(part), 0.0, 1e9));
             }
             if (o.engine.tensor_split.empty()) throw UsageError(f + ": expected a comma-separated list of numbers");
         }},
        {{"--model-path-rank"},
         "R=PATH",
         "under mpirun: process R reads the model at PATH (where machines keep it elsewhere); repeatable",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             const auto eq = v.find('=');
             if (eq == std::string::npos || eq + 1 == v.size())
                 throw UsageError(f + ": expected RANK=PATH, not '" + v + "'");
             o.model_path_of_process[(int) parse_int(f, v.substr(0, eq), 0, 1 << 20)] = v.substr(eq + 1);
         }},
        {{"--allreduce"},
         "ENGINE",
         "AllReduce engine for --tp > 1 (default: auto; the engine validates the name)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             if (v.empty()) throw UsageError(f + ": empty engine name");
             o.engine.allreduce = v;
         }},
        {{"--bf16-wire"},
         "",
         "BF16 on the AllReduce wire for the layers' partial sums (for links slower than memory; "
         "about 2^-9 relative rounding per sum)",
         [](ServerOptions & o, const std::string &, const std::string &) { o.engine.allreduce_bf16 = true; }},
        {{"--split-invariant"},
         "",
         "logits that do not depend on --tp / -ts: row-parallel products summed exactly on a reduction grid "
         "fixed by the model (a few more graph nodes per layer)",
         [](ServerOptions & o, const std::string &, const std::string &) { o.engine.split_invariant = true; }},
        {{"-to", "--timeout"},
         "N",
         "HTTP read/write timeout in seconds (default: 600)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.timeout_s = (int) parse_int(f, v, 1, 1 << 24);
         }},
        {{"--threads-http"},
         "N",
         "HTTP worker threads (default: -1 = parallel + 8)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.http_threads = (int32_t) parse_int(f, v, -1, 4096);
         }},
        {{"--max-body-size"},
         "N",
         "largest request body in bytes; larger ones get 413 (default: 8388608)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.max_body_size = (size_t) parse_int(f, v, 1, 1LL << 40);
         }},
        {{"--max-queue"},
         "N",
         "requests that may wait while all slots are busy; more get 503 (default: 64)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.max_queue = (int32_t) parse_int(f, v, 0, 1 << 20);
         }},
        // Default sampling parameters for requests that leave them out.
        {{"--temp"},
         "N",
         "default temperature (default: 0.8)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.sampling.temperature = parse_float(f, v, 0.0, 1e6);
         }},
        {{"--top-k"},
         "N",
         "default top-k (default: 40, 0 = off)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.sampling.top_k = (int32_t) parse_int(f, v, 0, 1 << 30);
         }},
        {{"--top-p"},
         "N",
         "default top-p (default: 0.95)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.sampling.top_p = parse_float(f, v, 0.0, 1.0);
         }},
        {{"--min-p"},
         "N",
         "default min-p (default: 0.05)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.sampling.min_p = parse_float(f, v, 0.0, 1.0);
         }},
        {{"--repeat-penalty"},
         "N",
         "default repeat penalty (default: 1.0 = off)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.sampling.repeat_penalty = parse_float(f, v, 0.0, 1e6);
         }},
        {{"--repeat-last-n"},
         "N",
         "tokens the penalties look back over (default: 64)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.sampling.penalty_last_n = (int32_t) parse_int(f, v, -1, 1 << 30);
         }},
        {{"--presence-penalty"},
         "N",
         "default presence penalty (default: 0.0)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.sampling.presence_penalty = parse_float(f, v, -2.0, 2.0);
         }},
        {{"--frequency-penalty"},
         "N",
         "default frequency penalty (default: 0.0)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             o.sampling.frequency_penalty = parse_float(f, v, -2.0, 2.0);
         }},
        {{"-s", "--seed"},
         "N",
         "default sampling seed (default: -1 = random)",
         [](ServerOptions & o, const std::string & f, const std::string & v) {
             const long long s = parse_int(f, v, -1, 0xFFFFFFFFLL);
             o.sampling.seed = s < 0 ? 0xFFFFFFFFu : (uint32_t) s;
         }},
        {{"-v", "--verbose"},
         "",
         "log every request and decode step",
         [](ServerOptions & o, const std::string &, const std::string &) { o.verbose = true; }},
        // llama-server flags that have no meaning here: accepted with a warning
        // so that existing command lines keep working.
        {{"-ngl", "--gpu-layers", "--n-gpu-layers"},
         "N",
         "(ignored: placement follows --tp)",
         [](ServerOptions & o, const std::string & f, const std::string &) { o.ignored_flags.push_back(f); }},
        {{"-ub", "--ubatch-size"},
         "N",
         "(ignored: one decode step is at most --batch-size tokens)",
         [](ServerOptions & o, const std::string & f, const std::string &) { o.ignored_flags.push_back(f); }},
        {{"-fa", "--flash-attn"},
         "on|off|auto",
         "(ignored)",
         [](ServerOptions & o, const std::string & f, const std::string &) { o.ignored_flags.push_back(f); }},
        {{"--jinja"},
         "",
         "(ignored: chat templates are always Jinja)",
         [](ServerOptions & o, const std::string & f, const std::string &) { o.ignored_flags.push_back(f); }},
        {{"-cb", "--cont-batching"},
         "",
         "(ignored: continuous batching is always on)",
         [](ServerOptions & o, const std::string & f, const std::string &) { o.ignored_flags.push_back(f); }},
        {{"--metrics", "--no-webui", "--mlock", "--no-mmap", "--no-warmup"},
         "",
         "(ignored)",
         [](ServerOptions & o, const std::string & f, const std::string &) { o.ignored_flags.push_back(f); }},
    };
    return table;
}

const Flag * find_flag(const std::string & name) {
    for (const auto & f : flags()) {
        for (const auto & n : f.names) {
            if (n == name) {
                return &f;
            }
        }
    }
    return nullptr;
}

}  // namespace

ServerOptions parse_server_options(int argc, char ** argv, bool & help) {
    ServerOptions o;
    o.engine.n_ctx = 0;
    o.engine.n_batch = 512;
    help = false;
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        std::string value;
        bool has_inline_value = false;
        if (arg.rfind("--", 0) == 0) {
            const auto eq = arg.find('=');
            if (eq != std::string::npos) {
                value = arg.substr(eq + 1);
                arg = arg.substr(0, eq);
                has_inline_value = true;
            }
        }
        const Flag * flag = find_flag(arg);
        if (flag == nullptr) {
            throw UsageError("unknown argument: " + arg + " (see --help)");
        }
        if (arg == "-h" || arg == "--help") {
            help = true;
            return o;
        }
        if (flag->value_name.empty()) {
            if (has_inline_value) {
                throw UsageError(arg + " takes no value");
            }
        } else if (!has_inline_value) {
            if (i + 1 >= argc) {
                throw UsageError(arg + ": missing value " + flag->value_name);
            }
            value = argv[++i];
        }
        flag->apply(o, arg, value);
    }
    if (o.engine.model_path.empty()) {
        throw UsageError("no model given: pass -m/--model FNAME (see --help)");
    }
    if (!o.engine.tensor_split.empty() && (int) o.engine.tensor_split.size() != o.engine.tp) {
        throw UsageError("--tensor-split has " + std::to_string(o.engine.tensor_split.size()) +
                         " entries but --tp is " + std::to_string(o.engine.tp));
    }
    if (o.engine.n_ctx > 0 && o.engine.n_ctx < o.n_parallel) {
        throw UsageError("--ctx-size " + std::to_string(o.engine.n_ctx) + " is smaller than --parallel " +
                         std::to_string(o.n_parallel) + ": every slot needs room");
    }
    o.engine.n_seq_max = o.n_parallel;
    return o;
}

void print_usage(const char * argv0) {
    std::printf("usage: %s -m MODEL.gguf [options]\n\n", argv0);
    std::printf("An OpenAI-compatible server for llama-tp (flag names follow llama-server).\n\noptions:\n");
    for (const auto & f : flags()) {
        std::string names;
        for (const auto & n : f.names) {
            names += (names.empty() ? "" : ", ") + n;
        }
        if (!f.value_name.empty()) {
            names += " " + f.value_name;
        }
        std::printf("  %-36s %s\n", names.c_str(), f.help.c_str());
    }
    std::printf(
        "\nendpoints: GET /health, GET /v1/models, POST /v1/completions, POST /v1/chat/completions,\n"
        "           POST /tokenize, POST /detokenize, GET /props\n");
}

}  // namespace llama_tp::server
