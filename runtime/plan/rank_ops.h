#pragma once
// The two values in which one rank's work differs between a CPU and a GPU,
// decided once by the runtime plan (runtime_plan.h) and only read below it.

namespace llama_tp {

// Which operations a rank's graph and weights may use.
enum class RankOps {
    Host,      // the CPU backend: ggml-ext's host operations too (row attention, one-pass products)
    GgmlOnly,  // any other backend, or --portable-graph: ggml's operations only
};

// How a rank's collectives and exact sums meet the other ranks'.
enum class CollectivePath {
    InGraph,      // inside the CPU backend's graph
    HostWaits,    // between graph segments, each segment waited for on the host
    ThroughHost,  // between graph segments, each value copied through host memory (--portable-graph)
    OnStream,     // queued on the GPU's stream between segments, no wait on the host
    Captured,     // queued on the stream, whole steps captured into CUDA graphs and replayed
};

const char * collective_path_name(CollectivePath path);

}  // namespace llama_tp
