#include "ggml-ext/exec/segment_executor.h"

#include "ggml-ext/ops/collective.h"
#include "ggml-ext/error.h"
#include "ggml-ext/ops/exact_sum.h"
#include "ggml-ext/exec/graph_fingerprint.h"

#include <string>
#include <utility>

namespace llama_tp {

SegmentExecutor::SegmentExecutor(ggml_backend_t backend, CollectiveRun mode, bool device_memory,
                                 std::unique_ptr<ExactSumKernels> exact, std::unique_ptr<StreamBridge> bridge,
                                 std::unique_ptr<StepCapture> capture)
    : backend_(backend),
      mode_(mode),
      device_memory_(device_memory),
      exact_(std::move(exact)),
      bridge_(std::move(bridge)),
      capture_(std::move(capture)) {
    if (bridge_ && (!device_memory_ || !exact_ || mode_ == CollectiveRun::SegmentsThroughHost)) {
        throw Error("a stream bridge needs collectives and exact sums on the device's memory");
    }
    if (capture_ && !bridge_) throw Error("capturing whole steps needs their collectives on the stream (a bridge)");
}

bool SegmentExecutor::is_boundary(ggml_tensor * node) const {
    if (ggml_cluster_allreduce_info(node, nullptr, nullptr)) return true;
    if (ggml_ext_exact_node(node, nullptr, nullptr) == GGML_EXT_EXACT_NONE) return false;
    return mode_ != CollectiveRun::Auto || !ggml_backend_supports_op(backend_, node);
}

bool SegmentExecutor::runs_in_graph(ggml_cgraph * gf) const {
    if (mode_ != CollectiveRun::Auto) return false;
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor * node = ggml_graph_node(gf, i);
        const bool ext = ggml_cluster_allreduce_info(node, nullptr, nullptr) ||
                         ggml_ext_exact_node(node, nullptr, nullptr) != GGML_EXT_EXACT_NONE;
        if (ext && !ggml_backend_supports_op(backend_, node)) return false;
    }
    return true;
}

void SegmentExecutor::split(ggml_cgraph * gf) {
    segments_.clear();
    const int n = ggml_graph_n_nodes(gf);
    int n_boundaries = 0;
    for (int i = 0; i < n; ++i) n_boundaries += is_boundary(ggml_graph_node(gf, i));
    ggml_init_params params = {(size_t) (n_boundaries + 1) * ggml_graph_overhead_custom((size_t) n, false), nullptr,
                               true};
    ctx_.reset(ggml_init(params));
    if (!ctx_) throw Error("out of memory splitting a graph at its collectives");
    Segment seg;
    seg.graph = ggml_new_graph_custom(ctx_.get(), (size_t) n, false);
    for (int i = 0; i < n; ++i) {
        ggml_tensor * node = ggml_graph_node(gf, i);
        if (is_boundary(node)) {
            seg.boundary = node;
            segments_.push_back(seg);
            seg = Segment{};
            seg.graph = ggml_new_graph_custom(ctx_.get(), (size_t) n, false);
        } else {
            // A backend runs a graph whole or not at all: say which node it lacks.
            if (!ggml_backend_supports_op(backend_, node)) {
                throw Error(std::string("the ") + ggml_backend_name(backend_) + " backend cannot run node '" +
                            node->name + "' (" + ggml_op_desc(node) + ", " + ggml_type_name(node->type) + ")");
            }
            ggml_graph_add_node(seg.graph, node);
        }
    }
    segments_.push_back(seg);
    capturable_ = true;
    for (int i = 0; i < n; ++i) capturable_ = capturable_ && ggml_graph_node(gf, i)->op != GGML_OP_MUL_MAT_ID;
    cached_graph_ = gf;
    cached_n_nodes_ = n;
    splits_built_++;
}

ggml_status SegmentExecutor::compute(ggml_cgraph * gf) {
    if (runs_in_graph(gf)) return ggml_backend_graph_compute(backend_, gf);
    if (gf != cached_graph_ || ggml_graph_n_nodes(gf) != cached_n_nodes_) split(gf);
    const ggml_status st = capture_ ? run_captured(gf) : run_segments();
    if (st == GGML_STATUS_SUCCESS && bridge_) ggml_backend_synchronize(backend_);
    return st;
}

// Replays the captured step where the graph is the one captured; captures a
// graph seen the step before (a shape that repeats); else runs it as it is.
ggml_status SegmentExecutor::run_captured(ggml_cgraph * gf) {
    if (!capturable_ || (healthy_ && !healthy_())) {
        last_fingerprint_.clear();
        return run_segments();
    }
    graph_fingerprint(gf, fingerprint_);
    ggml_status st = GGML_STATUS_SUCCESS;
    if (captures_ > 0 && fingerprint_ == captured_fingerprint_) {
        capture_->replay();
        replays_++;
    } else if (fingerprint_ == last_fingerprint_) {
        capture_->begin();
        try {
            st = run_segments();
        } catch (...) {
            capture_->abandon();
            throw;
        }
        if (st != GGML_STATUS_SUCCESS) {
            capture_->abandon();
            return st;
        }
        capture_->end_and_launch();
        captured_fingerprint_ = fingerprint_;
        captures_++;
        captured_collectives_ = 0;
        for (const Segment & seg : segments_) {
            captured_collectives_ += seg.boundary && ggml_cluster_allreduce_info(seg.boundary, nullptr, nullptr);
        }
    } else {
        st = run_segments();
    }
    std::swap(last_fingerprint_, fingerprint_);
    return st;
}

ggml_status SegmentExecutor::run_segments() {
    for (const Segment & seg : segments_) {
        if (ggml_graph_n_nodes(seg.graph) > 0) {
            const ggml_status st = bridge_ ? ggml_backend_graph_compute_async(backend_, seg.graph)
                                           : ggml_backend_graph_compute(backend_, seg.graph);
            if (st != GGML_STATUS_SUCCESS) return st;
        }
        if (!seg.boundary) continue;
        if (bridge_) {
            queue_on_stream(seg.boundary);
            continue;
        }
        ggml_backend_synchronize(backend_);
        if (ggml_cluster_allreduce_info(seg.boundary, nullptr, nullptr)) {
            run_collective(seg.boundary);
        } else {
            run_exact(seg.boundary, nullptr);
        }
    }
    return GGML_STATUS_SUCCESS;
}

void SegmentExecutor::queue_on_stream(ggml_tensor * node) {
    void * stream = bridge_->enter();
    ggml_cluster_allreduce_fn fn = nullptr;
    void * user = nullptr;
    if (ggml_cluster_allreduce_info(node, &fn, &user)) {
        fn(user, node->data, node->type, (size_t) ggml_nelements(node), stream);
    } else {
        run_exact(node, stream);
    }
    bridge_->leave();
}

bool SegmentExecutor::host_readable(const ggml_tensor * node) const {
    const ggml_backend_buffer_t buffer = node->view_src ? node->view_src->buffer : node->buffer;
    return mode_ != CollectiveRun::SegmentsThroughHost && buffer && ggml_backend_buffer_is_host(buffer);
}

void SegmentExecutor::run_collective(ggml_tensor * node) {
    ggml_cluster_allreduce_fn fn = nullptr;
    void * user = nullptr;
    ggml_cluster_allreduce_info(node, &fn, &user);
    const size_t n = (size_t) ggml_nelements(node);
    if (host_readable(node) || (device_memory_ && mode_ != CollectiveRun::SegmentsThroughHost)) {
        fn(user, node->data, node->type, n, nullptr);
        return;
    }
    staging_.resize(ggml_nbytes(node));
    ggml_backend_tensor_get(node, staging_.data(), 0, staging_.size());
    fn(user, staging_.data(), node->type, n, nullptr);
    ggml_backend_tensor_set(node, staging_.data(), 0, staging_.size());
}

void SegmentExecutor::run_exact(ggml_tensor * node, void * stream) {
    int first = 0, n_parts = 0;
    const ggml_ext_exact_op op = ggml_ext_exact_node(node, &first, &n_parts);
    const size_t n = (size_t) ggml_nelements(node);
    // The backend's kernels where it has them, else the host's where it can
    // read every value, else through host copies.
    const bool on_device = exact_ && mode_ != CollectiveRun::SegmentsThroughHost;
    bool on_host = !on_device && host_readable(node);
    for (int j = 0; j < n_parts && on_host; ++j) on_host = host_readable(node->src[first + j]);
    if (op == GGML_EXT_EXACT_ROUND) on_host = on_host && host_readable(node->src[0]);
    if (!on_device && !on_host) {
        run_exact_through_host(node, op, first, n_parts, n);
        return;
    }
    const float * parts[GGML_MAX_SRC];
    for (int j = 0; j < n_parts; ++j) parts[j] = static_cast<const float *>(node->src[first + j]->data);
    exact_arithmetic(op, parts, n_parts, node->src[0]->data, node->data, n, on_device, stream);
}

// The node's sources and (for an accumulation) its running sum copied to the
// host, the arithmetic there, and the result copied back.
void SegmentExecutor::run_exact_through_host(ggml_tensor * node, ggml_ext_exact_op op, int first, int n_parts,
                                             size_t n) {
    std::vector<std::vector<float>> values((size_t) n_parts, std::vector<float>(n));
    const float * parts[GGML_MAX_SRC];
    for (int j = 0; j < n_parts; ++j) {
        ggml_backend_tensor_get(node->src[first + j], values[j].data(), 0, n * sizeof(float));
        parts[j] = values[j].data();
    }
    std::vector<double> in(op == GGML_EXT_EXACT_ROUND ? n : 0);
    if (op == GGML_EXT_EXACT_ROUND) ggml_backend_tensor_get(node->src[0], in.data(), 0, n * sizeof(double));
    std::vector<uint8_t> out(ggml_nbytes(node));
    if (op == GGML_EXT_EXACT_ACCUMULATE) ggml_backend_tensor_get(node, out.data(), 0, out.size());
    exact_arithmetic(op, parts, n_parts, in.data(), out.data(), n, false, nullptr);
    ggml_backend_tensor_set(node, out.data(), 0, out.size());
}

// The node's arithmetic on pointers the kernels (on_device) or the host can use:
// in is the rounding's source, out the node's values.
void SegmentExecutor::exact_arithmetic(ggml_ext_exact_op op, const float * const * parts, int n_parts, const void * in,
                                       void * out, size_t n, bool on_device, void * stream) {
    if (op == GGML_EXT_EXACT_ROUND) {
        const double * from = static_cast<const double *>(in);
        if (on_device) {
            exact_->round(from, static_cast<float *>(out), n, stream);
        } else {
            exact_round_range(from, static_cast<float *>(out), 0, n);
        }
        return;
    }
    const bool accumulate = op == GGML_EXT_EXACT_ACCUMULATE;
    if (on_device) {
        exact_->sum(parts, n_parts, static_cast<double *>(out), accumulate, n, stream);
    } else {
        exact_sum_range(parts, n_parts, static_cast<double *>(out), accumulate, 0, n);
    }
}

}  // namespace llama_tp
