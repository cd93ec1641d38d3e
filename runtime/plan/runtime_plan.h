#pragma once
// The runtime resolved once: what this process's ranks do, from the user's
// options, the model, the devices found and the environment. A pure
// function of those (no model is loaded, no variable read), so that every
// choice is made in one place and tested on its own; the ranks, the
// weights, the graph and the engines only read it.

#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/environment.h"
#include "runtime/engine_options.h"
#include "runtime/plan/rank_ops.h"

#include <string>
#include <vector>

namespace llama_tp {

// What the plan needs to know of a rank's device.
struct RankDeviceFacts {
    std::string name;       // "CPU", "CUDA0"
    bool cpu = true;        // the CPU backend
    int cuda_ordinal = -1;  // the CUDA runtime's ordinal of its GPU, else -1
};

// What the plan needs to know of the model and of this host.
struct PlanFacts {
    // Every row-parallel matrix is multiplied in one pass under
    // split-invariant sums (ModelWeights::row_parallel_in_one_pass).
    bool row_parallel_in_one_pass = false;
    // The one-pass kernel beats ggml's products on this CPU for every type of
    // the model it takes (ggml_ext_exact_matmul_preferred).
    bool one_pass_faster = false;
    // Its SIMD paths on this CPU, by type ("q8_0 avx512, q4_K avx512";
    // ggml_ext_exact_matmul_kernel), for the log.
    std::string one_pass_kernel;
    std::vector<RankDeviceFacts> devices;  // one per rank of this process
};

struct RuntimePlan {
    RankOps ops = RankOps::Host;
    bool split_invariant = false;    // the row-parallel products summed on the reduction grid, exactly
    bool one_pass_products = false;  // the other products of the types it takes through the one-pass kernel
    // The engine for this process's ranks (n_ranks: the ranks it joins).
    AllReduceConfig allreduce;
    bool portable_graph = false;   // --portable-graph
    bool stream_asked = false;     // LLAMA_TP_STREAM_COLLECTIVES=1
    bool capture_asked = false;    // LLAMA_TP_COLLECTIVE_GRAPH_CAPTURE=1 (or upstream's name)
    std::vector<std::string> log;  // what was decided and why, a line each (for process 0 to print)

    bool host_ops() const { return ops == RankOps::Host; }
    // How the ranks' collectives run with the engine built for them
    // (nullptr: a single rank, whose exact sums still run between segments
    // on a GPU): what the engine can do decides between the asked modes.
    CollectivePath collectives(const AllReduceEngine * engine) const;
};

// Throws llama_tp::Error for a malformed variable or options that exclude
// each other (split-invariant sums on a BF16 wire).
RuntimePlan resolve_runtime(const EngineOptions & options, const PlanFacts & facts, const Environment & env);

// The environment's switches, each 0 or 1 (unset: 0); throw llama_tp::Error
// naming the variable for anything else. Collectives wait on the host by
// default: the on-stream path is new, and on one GPU shared by two ranks
// (GGML_CUDA_DEVICES) its kernels, each spinning for the other's, advanced
// only about once a millisecond.
bool stream_collectives_asked(const Environment & env);  // LLAMA_TP_STREAM_COLLECTIVES
bool graph_capture_asked(const Environment & env);       // ours, else GGML_CUDA_COLLECTIVE_GRAPH_CAPTURE

}  // namespace llama_tp
