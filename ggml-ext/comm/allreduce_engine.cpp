#include "ggml-ext/comm/allreduce_engine.h"

#include "ggml-ext/comm/host/allreduce_butterfly.h"
#include "ggml-ext/comm/host/allreduce_cpu.h"
#include "ggml-ext/comm/host/allreduce_none.h"
#include "ggml-ext/comm/process_group.h"
#include "ggml-ext/environment.h"
#include "ggml-ext/error.h"
#ifdef LLAMA_TP_HAVE_CUDA
#include "ggml-ext/comm/cuda/allreduce_internal.h"
#endif
#ifdef LLAMA_TP_HAVE_NCCL
#include "ggml-ext/comm/cuda/allreduce_nccl.h"
#endif

#include <cctype>
#include <cstdio>
#include <vector>

namespace llama_tp {
namespace {

std::unique_ptr<AllReduceEngine> needs(const char * what) {
    throw Error(std::string("needs ") + what);
}

constexpr const char * kNames =
    "auto, cpu, butterfly, none; where built: nccl, internal (GGML_CUDA_ALLREDUCE), rccl, mpi";

// The engines to try for a name, best first, and whether the name was "auto".
struct Chain {
    std::vector<const char *> links;
    bool automatic = false;
};

Chain chain_for(const std::string & requested, const AllReduceConfig & config) {
    const std::string name = normalized_engine_name(requested);
    if (name.empty() || name == "auto") {
        if (config.n_ranks == 1) return {{"none"}, true};
        if (config.memory == RankMemory::Cuda) return {{"nccl", "internal", "cpu", "butterfly"}, true};
        return {{"cpu", "butterfly"}, true};
    }
    if (name == "cpu") return {{"cpu", "butterfly"}};
    if (name == "butterfly") return {{"butterfly"}};
    if (name == "none") return {{"none"}};
    if (name == "nccl") return {{"nccl", "internal", "cpu", "butterfly"}};
    if (name == "internal") return {{"internal", "cpu", "butterfly"}};
    if (name == "rccl") return {{"rccl", "cpu", "butterfly"}};
    if (name == "mpi") return {{"mpi", "cpu", "butterfly"}};
    throw Error("unknown allreduce engine '" + requested + "' (valid: " + kNames + ")");
}

// Why the chosen engine fits, for the log line.
std::string fit_of(const AllReduceEngine & engine, const AllReduceConfig & config) {
    const bool staged = config.memory == RankMemory::Cuda && !engine.takes_device_memory();
    return engine.joins() + (staged ? " (copied from the devices)" : "");
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

}  // namespace

std::string ranks_text(int n_ranks) {
    return std::to_string(n_ranks) + (n_ranks == 1 ? " rank" : " ranks");
}

std::string normalized_engine_name(const std::string & name) {
    std::string out;
    for (const char c : name) {
        if (!std::isspace((unsigned char) c)) out += (char) std::tolower((unsigned char) c);
    }
    return out;
}

const AllReduceBuilders & built_allreduce_engines() {
    static const AllReduceBuilders builders = {
        {"none", [](const AllReduceConfig & c) { return std::make_unique<NoneAllReduce>(c); }},
        {"cpu", [](const AllReduceConfig & c) { return std::make_unique<CpuAllReduce>(c); }},
        {"butterfly", [](const AllReduceConfig & c) { return std::make_unique<ButterflyAllReduce>(c); }},
#ifdef LLAMA_TP_HAVE_NCCL
        {"nccl", [](const AllReduceConfig & c) { return std::make_unique<NcclAllReduce>(c); }},
#elif defined(LLAMA_TP_HAVE_CUDA)
        {"nccl", [](const AllReduceConfig &) { return needs("a build with LLAMA_TP_NCCL=ON"); }},
#else
        {"nccl", [](const AllReduceConfig &) { return needs("a CUDA build"); }},
#endif
#ifdef LLAMA_TP_HAVE_CUDA
        {"internal", [](const AllReduceConfig & c) { return std::make_unique<InternalAllReduce>(c); }},
#else
        {"internal", [](const AllReduceConfig &) { return needs("a CUDA build"); }},
#endif
// On a HIP build the nccl engine runs on RCCL, which keeps NCCL's names.
#if defined(LLAMA_TP_HAVE_HIP) && defined(LLAMA_TP_HAVE_NCCL)
        {"rccl", [](const AllReduceConfig & c) { return std::make_unique<NcclAllReduce>(c); }},
#elif defined(LLAMA_TP_HAVE_HIP)
        {"rccl", [](const AllReduceConfig &) { return needs("a build with LLAMA_TP_NCCL=ON"); }},
#else
        {"rccl", [](const AllReduceConfig &) { return needs("a HIP build"); }},
#endif
// The mpi engine joins processes: their group builds it (ProcessGroup::make_allreduce).
#ifdef LLAMA_TP_HAVE_MPI
        {"mpi", [](const AllReduceConfig &) { return needs("ranks in several processes (launched by mpirun)"); }},
#else
        {"mpi", [](const AllReduceConfig &) { return needs("an MPI build"); }},
#endif
    };
    return builders;
}

AllReduceChoice choose_allreduce_engine(const AllReduceConfig & config, const AllReduceBuilders & builders) {
    validate(config);
    const Chain chain = chain_for(config.engine, config);
    std::string skipped;  // "nccl: needs a CUDA build; internal: needs a CUDA build"
    std::string first_reason;
    for (const char * link : chain.links) {
        try {
            const auto builder = builders.find(link);
            if (builder == builders.end()) throw Error("not in this build");
            AllReduceChoice choice{builder->second(config), ""};
            const AllReduceEngine & e = *choice.engine;
            if (skipped.empty()) {
                choice.log_line = std::string("llama-tp: allreduce engine ") + e.name() + " (" +
                                  (chain.automatic ? "auto" : "requested") + ": " + fit_of(e, config) + ")";
            } else {
                choice.log_line = std::string("llama-tp: warning: allreduce engine ") + chain.links.front() +
                                  " unavailable (" + skipped + "); using " + e.name() + " (" + fit_of(e, config) + ")";
            }
            return choice;
        } catch (const Error & e) {
            if (first_reason.empty()) first_reason = e.what();
            skipped += (skipped.empty() ? "" : "; ") + std::string(link) + ": " + e.what();
        }
    }
    throw Error(chain.links.size() == 1 ? first_reason : "allreduce: no engine can serve this group (" + skipped + ")");
}

void AllReduceEngine::allreduce_on_stream(int, float *, size_t, void *) {
    abort(std::string("allreduce: the ") + name() + " engine does not run on a GPU stream");
}

void AllReduceEngine::allreduce_on_stream(int, double *, size_t, void *) {
    abort(std::string("allreduce: the ") + name() + " engine does not run on a GPU stream");
}

std::unique_ptr<AllReduceEngine> make_allreduce_engine(const AllReduceConfig & config) {
    ProcessGroup * processes = config.processes;
    if (processes) {
        const std::string name = normalized_engine_name(config.engine);
        if (name != "auto" && !name.empty() && name != "mpi" && name != "nccl") {
            throw Error("allreduce engine '" + config.engine + "' joins the ranks of one process; ranks in " +
                        std::to_string(processes->size()) + " processes need mpi, nccl (or auto)");
        }
        return processes->make_allreduce(config);
    }
    AllReduceChoice choice = choose_allreduce_engine(config, built_allreduce_engines());
    std::fprintf(stderr, "%s\n", choice.log_line.c_str());
    return std::move(choice.engine);
}

std::string allreduce_engine_from(const Environment & env) {
    const std::string own = env.get("LLAMA_TP_ALLREDUCE");
    if (!own.empty()) return own;
    const std::string upstream = env.get("GGML_CUDA_ALLREDUCE");
    return normalized_engine_name(upstream) == "none" ? "butterfly" : upstream;
}

}  // namespace llama_tp
