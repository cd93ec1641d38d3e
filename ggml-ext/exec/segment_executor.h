#pragma once
// Runs one rank's graph on its backend. Where the backend runs collective
// nodes in-graph (the CPU backend) the graph runs whole. Elsewhere the graph
// is split into segments at its collective nodes and at the exact-sum nodes
// (exact_sum.h) the backend cannot run: segment, node, segment, ... The
// executor runs those nodes itself between the segments: a collective through
// its callback, an exact sum through ExactSumKernels on the backend's memory
// where it has them, else on the host. The split is cached and reused while
// the same graph is run again (every decode step of an unchanged shape), so
// steady-state decode builds nothing. Values the host cannot read are copied
// out to the host and back again where no kernel takes them as they are.
//
// With a StreamBridge (a GPU backend whose engine sums on a stream) nothing
// waits on the host between segments: each segment is queued, the node's
// work is queued on the bridge's stream after it, and the next segment after
// that; compute() waits once, at the end. With a StepCapture too, a graph run
// twice in a row with the same fingerprint (graph_fingerprint.h) is captured
// whole, collectives included, into one CUDA graph the second time, and
// replayed while its fingerprint stays the same (the collectives' callbacks
// are then not called: their work is in the graph). Graphs of MUL_MAT_ID
// (experts) are never captured: ggml may wait on the host inside them.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "ggml-ext/ops/exact_sum.h"
#include "ggml-ext/ops/exact_sum_kernels.h"
#include "ggml-ext/exec/step_capture.h"
#include "ggml-ext/exec/stream_bridge.h"

namespace llama_tp {

// How collectives run. The forced modes run a CPU backend's graph the way
// another backend's runs, to check that path on any machine.
enum class CollectiveRun {
    Auto,                 // in-graph where the backend can, else between segments
    Segments,             // between segments, always (exact sums too)
    SegmentsThroughHost,  // between segments, each copied through host memory
};

class SegmentExecutor {
  public:
    // device_memory: the collectives' callbacks take the backend's memory as
    // it is (a GPU engine's); otherwise memory the host cannot read is copied.
    // exact: the exact sums' kernels on the backend's memory (may be null).
    // bridge: queue the nodes' work on the backend's stream order (may be
    // null; needs device_memory, exact kernels, and callbacks that take a stream).
    // capture: capture and replay whole steps (may be null; needs a bridge).
    SegmentExecutor(ggml_backend_t backend, CollectiveRun mode = CollectiveRun::Auto, bool device_memory = false,
                    std::unique_ptr<ExactSumKernels> exact = nullptr, std::unique_ptr<StreamBridge> bridge = nullptr,
                    std::unique_ptr<StepCapture> capture = nullptr);

    // Throws llama_tp::Error naming a node the backend cannot run.
    ggml_status compute(ggml_cgraph * gf);

    // How many times a graph was split (not counting reuse of a cached split).
    int64_t splits_built() const { return splits_built_; }
    size_t n_segments() const { return segments_.size(); }
    // Steps captured into a CUDA graph, and steps replayed from one.
    int64_t captures() const { return captures_; }
    int64_t replays() const { return replays_; }
    // The collectives in the step replayed (their callbacks are not called then).
    int collectives_per_replay() const { return captured_collectives_; }
    // With a capture: steps are replayed only while healthy() holds (the
    // collectives' group has not failed: a replay skips their checks); they
    // run as they are otherwise.
    void replay_only_while(std::function<bool()> healthy) { healthy_ = std::move(healthy); }

  private:
    struct Segment {
        ggml_cgraph * graph = nullptr;     // nodes before the boundary node (may be empty)
        ggml_tensor * boundary = nullptr;  // a node the executor runs; nullptr for the tail segment
    };
    bool is_boundary(ggml_tensor * node) const;
    bool runs_in_graph(ggml_cgraph * gf) const;
    void split(ggml_cgraph * gf);
    ggml_status run_segments();
    ggml_status run_captured(ggml_cgraph * gf);
    void run_collective(ggml_tensor * node);
    void run_exact(ggml_tensor * node, void * stream);
    void queue_on_stream(ggml_tensor * node);
    void run_exact_through_host(ggml_tensor * node, ggml_ext_exact_op op, int first, int n_parts, size_t n);
    void exact_arithmetic(ggml_ext_exact_op op, const float * const * parts, int n_parts, const void * in, void * out,
                          size_t n, bool on_device, void * stream);
    bool host_readable(const ggml_tensor * node) const;

    ggml_backend_t backend_;
    CollectiveRun mode_;
    bool device_memory_;
    std::unique_ptr<ExactSumKernels> exact_;
    std::unique_ptr<StreamBridge> bridge_;
    std::unique_ptr<StepCapture> capture_;
    std::vector<int64_t> fingerprint_, last_fingerprint_, captured_fingerprint_;
    int64_t captures_ = 0, replays_ = 0;
    int captured_collectives_ = 0;
    // No node of the split waits on the host (ggml's MUL_MAT_ID may copy its
    // expert ids to the host and wait): only such graphs are captured.
    bool capturable_ = true;
    std::function<bool()> healthy_;
    std::vector<uint8_t> staging_;  // a collective's values in host memory
    ggml_cgraph * cached_graph_ = nullptr;
    int cached_n_nodes_ = -1;
    ggml_context_ptr ctx_;
    std::vector<Segment> segments_;
    int64_t splits_built_ = 0;
};

}  // namespace llama_tp
