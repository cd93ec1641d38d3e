#pragma once
// Runs one rank's graph on its backend. Where the backend runs collective
// nodes in-graph (the CPU backend) the graph runs whole. Elsewhere the graph
// is split at its collective nodes into segments: segment, collective,
// segment, ... The split is cached and reused while the same graph is run
// again (every decode step of an unchanged shape), so steady-state decode
// builds nothing.

#include <cstdint>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpp.h"

namespace llama_tp {

class MetaExecutor {
  public:
    // force_segments: split even where the backend could run the collectives
    // in-graph (for testing the segmented path on CPU).
    explicit MetaExecutor(ggml_backend_t backend, bool force_segments = false);

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

    ggml_backend_t backend_;
    bool force_segments_;
    ggml_cgraph * cached_graph_ = nullptr;
    int cached_n_nodes_ = -1;
    ggml_context_ptr ctx_;
    std::vector<Segment> segments_;
    int64_t splits_built_ = 0;
};

}  // namespace llama_tp
