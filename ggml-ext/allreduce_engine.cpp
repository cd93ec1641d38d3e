#include "ggml-ext/allreduce_engine.h"

#include "ggml-ext/allreduce_butterfly.h"
#include "ggml-ext/allreduce_cpu.h"
#include "ggml-ext/allreduce_none.h"
#include "ggml-ext/error.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace llama_tp {
namespace {

// Builds one engine, or throws llama_tp::Error saying why it cannot serve this group.
using Builder = std::unique_ptr<AllReduceEngine> (*)(const AllReduceConfig &);

struct Link {
    const char * name;
    Builder build;
};

std::unique_ptr<AllReduceEngine> build_none(const AllReduceConfig & c) {
    return std::make_unique<NoneAllReduce>(c);
}
std::unique_ptr<AllReduceEngine> build_cpu(const AllReduceConfig & c) {
    return std::make_unique<CpuAllReduce>(c);
}
std::unique_ptr<AllReduceEngine> build_butterfly(const AllReduceConfig & c) {
    return std::make_unique<ButterflyAllReduce>(c);
}
std::unique_ptr<AllReduceEngine> needs_cuda(const AllReduceConfig &) {
    throw Error("needs a CUDA build");
}
std::unique_ptr<AllReduceEngine> needs_hip(const AllReduceConfig &) {
    throw Error("needs a HIP build");
}
std::unique_ptr<AllReduceEngine> needs_mpi(const AllReduceConfig &) {
    throw Error("needs an MPI build");
}

constexpr Link kNone{"none", build_none};
constexpr Link kCpu{"cpu", build_cpu};
constexpr Link kButterfly{"butterfly", build_butterfly};
constexpr Link kNccl{"nccl", needs_cuda};
constexpr Link kInternal{"internal", needs_cuda};
constexpr Link kRccl{"rccl", needs_hip};
constexpr Link kMpi{"mpi", needs_mpi};

constexpr const char * kNames =
    "auto, cpu, butterfly, none; where built: nccl, internal (GGML_CUDA_ALLREDUCE), rccl, mpi";

// The engines to try for a name, best first, and whether the name was "auto".
struct Chain {
    std::vector<Link> links;
    bool automatic = false;
};

Chain chain_for(const std::string & requested, int n_ranks) {
    const std::string name = normalized_engine_name(requested);
    if (name.empty() || name == "auto") {
        if (n_ranks == 1) return {{kNone}, true};
        return {{kCpu, kButterfly}, true};
    }
    if (name == "cpu") return {{kCpu, kButterfly}};
    if (name == "butterfly") return {{kButterfly}};
    if (name == "none") return {{kNone}};
    if (name == "nccl") return {{kNccl, kInternal, kCpu, kButterfly}};
    if (name == "internal") return {{kInternal, kCpu, kButterfly}};
    if (name == "rccl") return {{kRccl, kCpu, kButterfly}};
    if (name == "mpi") return {{kMpi, kCpu, kButterfly}};
    throw Error("unknown allreduce engine '" + requested + "' (valid: " + kNames + ")");
}

std::string ranks_text(int n_ranks) {
    return std::to_string(n_ranks) + (n_ranks == 1 ? " rank" : " ranks");
}

// Why the chosen engine fits, for the log line.
std::string fit_of(const AllReduceEngine & engine) {
    const std::string name = engine.name();
    if (name == "cpu") return ranks_text(engine.n_ranks()) + " in one process, host memory";
    if (name == "butterfly") return ranks_text(engine.n_ranks()) + ", pairwise exchange";
    return "1 rank, nothing to reduce";
}

void validate(const AllReduceConfig & config) {
    if (config.n_ranks < 1) {
        throw Error("allreduce: a group needs at least 1 rank, not " + std::to_string(config.n_ranks));
    }
    if (!(config.timeout_s > 0)) {
        throw Error("allreduce: the timeout must be a positive number of seconds, not " +
                    std::to_string(config.timeout_s));
    }
}

std::string env_value(const char * variable) {
    const char * value = std::getenv(variable);
    return value ? value : "";
}

}  // namespace

std::string normalized_engine_name(const std::string & name) {
    std::string out;
    for (const char c : name) {
        if (!std::isspace((unsigned char) c)) out += (char) std::tolower((unsigned char) c);
    }
    return out;
}

const char * allreduce_engine_names() {
    return kNames;
}

std::unique_ptr<AllReduceEngine> make_allreduce_engine(const AllReduceConfig & config) {
    validate(config);
    const Chain chain = chain_for(config.engine, config.n_ranks);
    std::string skipped;  // "nccl: needs a CUDA build; internal: needs a CUDA build"
    std::string first_reason;
    for (const Link & link : chain.links) {
        try {
            std::unique_ptr<AllReduceEngine> engine = link.build(config);
            if (skipped.empty()) {
                std::fprintf(stderr, "llama-tp: allreduce engine %s (%s: %s)\n", engine->name(),
                             chain.automatic ? "auto" : "requested", fit_of(*engine).c_str());
            } else {
                std::fprintf(stderr, "llama-tp: warning: allreduce engine %s unavailable (%s); using %s (%s)\n",
                             chain.links.front().name, skipped.c_str(), engine->name(), fit_of(*engine).c_str());
            }
            return engine;
        } catch (const Error & e) {
            if (first_reason.empty()) first_reason = e.what();
            skipped += (skipped.empty() ? "" : "; ") + std::string(link.name) + ": " + e.what();
        }
    }
    throw Error(chain.links.size() == 1 ? first_reason : "allreduce: no engine can serve this group (" + skipped + ")");
}

std::string allreduce_engine_from_env() {
    const std::string own = env_value("LLAMA_TP_ALLREDUCE");
    return own.empty() ? env_value("GGML_CUDA_ALLREDUCE") : own;
}

}  // namespace llama_tp
