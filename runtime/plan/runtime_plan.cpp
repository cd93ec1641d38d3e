#include "runtime/plan/runtime_plan.h"

#include "runtime/error.h"

#include <algorithm>

namespace llama_tp {
namespace {

// A switch of the environment: 0 or 1, unset or empty being 0; nullopt where
// none of the variables is set.
std::optional<bool> switch_of(const Environment & env, std::initializer_list<const char *> variables) {
    for (const char * variable : variables) {
        const std::string value = env.get(variable);
        if (value.empty()) continue;
        if (value != "0" && value != "1") {
            throw Error(std::string(variable) + " must be 0 or 1, not '" + value + "'");
        }
        return value == "1";
    }
    return std::nullopt;
}

// Split-invariant sums where asked, else where they cost nothing: on the
// CPU when every row-parallel matrix is multiplied in one pass and the wire
// does not round. On other backends each grid cell is a product of its own,
// its sums added between graph segments: asked for only.
void decide_sums(RuntimePlan & plan, const EngineOptions & o, const PlanFacts & facts, const Environment & env) {
    const bool asked = o.split_invariant.has_value();
    // Validated wherever the ranks run: a malformed value stops the load.
    const std::optional<bool> forced_products = switch_of(env, {"LLAMA_TP_ONE_PASS_PRODUCTS"});
    if (!plan.host_ops()) {
        plan.split_invariant = o.split_invariant.value_or(false);
        plan.one_pass_products = false;
        if (plan.split_invariant) {
            plan.log.push_back("llama-tp: split-invariant sums on " + facts.devices.front().name +
                               ": one product per grid cell, the cells added in double between graph segments");
        }
        return;
    }
    const bool one_pass = facts.row_parallel_in_one_pass;
    plan.split_invariant = asked ? *o.split_invariant : one_pass && o.allreduce_wire != WireType::BF16;
    // The other products of its types take the one-pass kernel only with
    // split-invariant sums (else the products are upstream's): where asked,
    // else where LLAMA_TP_ONE_PASS_PRODUCTS says, else where it is faster.
    if (!plan.split_invariant) {
        plan.one_pass_products = false;
    } else if (o.one_pass_products) {
        plan.one_pass_products = *o.one_pass_products;
    } else {
        plan.one_pass_products = forced_products.value_or(facts.one_pass_faster);
    }
    if (plan.split_invariant && one_pass) {
        plan.log.push_back(
            "llama-tp: split-invariant sums, one pass over every row-parallel matrix (" + facts.one_pass_kernel +
            "); the other matrices of those types " +
            (plan.one_pass_products ? "through the same kernel (batch-invariant)" : "through ggml's products"));
    } else if (!asked && !one_pass) {
        plan.log.push_back(
            "llama-tp: float sums (results move with --tp / -ts): this model's attn_output (ssm_out) and ffn_down are "
            "not all dense q8_0 (or K-quants, q4_0 and IQ4_XS on a CPU with AVX-512), which split-invariant sums "
            "multiply in one pass at no cost; --split-invariant forces them (one product per grid cell for other "
            "types, 7-15% slower on one device)");
    }
}

AllReduceConfig allreduce_config(const RuntimePlan & plan, const EngineOptions & o, const PlanFacts & facts,
                                 const Environment & env) {
    AllReduceConfig ac;
    const std::string from_env = allreduce_engine_from(env);
    ac.engine = o.allreduce == "auto" && !from_env.empty() ? from_env : o.allreduce;
    ac.n_ranks = o.tp;
    ac.wire = plan.split_invariant ? WireType::F32 : o.allreduce_wire;
    ac.gpu_sizes = GpuAllReduceSizes::from(env);
    // The copy engines meet the other rank on the host: no replay from a graph.
    if (plan.capture_asked) ac.gpu_sizes.internal_copy_min_bytes = 0;
    // Ranks on CUDA devices only: engines of device memory may serve them
    // (--portable-graph copies every collective's values to the host).
    const bool cuda =
        !plan.portable_graph && std::all_of(facts.devices.begin(), facts.devices.end(),
                                            [](const RankDeviceFacts & d) { return d.cuda_ordinal >= 0; });
    ac.memory = cuda ? RankMemory::Cuda : RankMemory::Host;
    if (cuda) {
        for (const RankDeviceFacts & d : facts.devices) ac.cuda_devices.push_back(d.cuda_ordinal);
    }
    return ac;
}

}  // namespace

const char * collective_path_name(CollectivePath path) {
    switch (path) {
        case CollectivePath::InGraph:
            return "in the graph";
        case CollectivePath::HostWaits:
            return "between graph segments, each segment waited for on the host";
        case CollectivePath::ThroughHost:
            return "between graph segments, through host memory";
        case CollectivePath::OnStream:
            return "queued on the GPUs' streams, no wait on the host between graph segments";
        case CollectivePath::Captured:
            return "queued on the GPUs' streams, whole steps captured into CUDA graphs and replayed (ggml's own "
                   "graphs off)";
    }
    return "?";
}

bool stream_collectives_asked(const Environment & env) {
    return switch_of(env, {"LLAMA_TP_STREAM_COLLECTIVES"}).value_or(false);
}

bool graph_capture_asked(const Environment & env) {
    return switch_of(env, {"LLAMA_TP_COLLECTIVE_GRAPH_CAPTURE", "GGML_CUDA_COLLECTIVE_GRAPH_CAPTURE"}).value_or(false);
}

RuntimePlan resolve_runtime(const EngineOptions & o, const PlanFacts & facts, const Environment & env) {
    if (o.split_invariant == true && o.allreduce_wire == WireType::BF16) {
        throw Error("--split-invariant needs exact sums and --bf16-wire rounds them: use one or the other");
    }
    if (facts.devices.empty()) throw Error("the runtime plan needs a device per rank");
    RuntimePlan plan;
    plan.portable_graph = o.portable_graph;
    plan.stream_asked = stream_collectives_asked(env);
    plan.capture_asked = graph_capture_asked(env);
    const bool all_cpu =
        std::all_of(facts.devices.begin(), facts.devices.end(), [](const RankDeviceFacts & d) { return d.cpu; });
    plan.ops = all_cpu && !o.portable_graph ? RankOps::Host : RankOps::GgmlOnly;
    decide_sums(plan, o, facts, env);
    plan.allreduce = allreduce_config(plan, o, facts, env);
    return plan;
}

CollectivePath RuntimePlan::collectives(const AllReduceEngine * engine) const {
    if (host_ops()) return CollectivePath::InGraph;
    if (portable_graph) return CollectivePath::ThroughHost;
    if (!engine || !engine->runs_on_stream()) return CollectivePath::HostWaits;
    if (capture_asked && engine->sums_replay_in_graphs()) return CollectivePath::Captured;
    return stream_asked ? CollectivePath::OnStream : CollectivePath::HostWaits;
}

}  // namespace llama_tp
