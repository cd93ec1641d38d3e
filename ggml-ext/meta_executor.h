#pragma once
// Runs one rank's graph on its backend. Where the backend runs collective
// nodes in-graph (the CPU backend) the graph runs whole. Elsewhere the graph
// is split at its collective nodes into segments: segment, collective,
// segment, ... The split is cached and reused while the same graph is run
// again (every decode step of an unchanged shape), so steady-state decode
// builds nothing. A collective whose values are not in host memory is
// copied out to the host for its callback and back again.

#include <cstdint>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpp.h"

namespace llama_tp {

// How collectives run. The forced modes run a CPU backend's graph the way
// another backend's runs, to check that path on any machine.
enum class CollectiveRun {
    Auto,                 // in-graph where the backend can, else between segments
    Segments,             // between segments, always
    SegmentsThroughHost,  // between segments, each copied through host memory
};

class MetaExecutor {
  public:
    // device_memory: the collectives' callbacks take the backend's memory as
    // it is (a GPU engine's); otherwise memory the host cannot read is copied.
    explicit MetaExecutor(ggml_backend_t backend, CollectiveRun mode = CollectiveRun::Auto, bool device_memory = false);

    // Throws llama_tp::Error naming a node the backend cannot run.
    ggml_status compute(ggml_cgraph * gf);

    // How many times a graph was split (not counting reuse of a cached split).
    int64_t splits_built() const { return splits_built_; }
    size_t n_segments() const { return segments_.size(); }

  private:
    struct Segment {
        ggml_cgraph * graph = nullptr;       // nodes before the collective (may be empty)
        ggml_tensor * collective = nullptr;  // nullptr for the tail segment
    };
    bool runs_in_graph(ggml_cgraph * gf) const;
    void split(ggml_cgraph * gf);
    void run_collective(ggml_tensor * node);

    ggml_backend_t backend_;
    CollectiveRun mode_;
    bool device_memory_;
    std::vector<uint8_t> staging_;  // a collective's values in host memory
    ggml_cgraph * cached_graph_ = nullptr;
    int cached_n_nodes_ = -1;
    ggml_context_ptr ctx_;
    std::vector<Segment> segments_;
    int64_t splits_built_ = 0;
};

}  // namespace llama_tp
