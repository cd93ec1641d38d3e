#include "ggml-ext/meta_executor.h"

#include "ggml-ext/collective.h"
#include "ggml-ext/error.h"

#include <string>

namespace llama_tp {

MetaExecutor::MetaExecutor(ggml_backend_t backend, CollectiveRun mode, bool device_memory)
    : backend_(backend), mode_(mode), device_memory_(device_memory) {}

bool MetaExecutor::runs_in_graph(ggml_cgraph * gf) const {
    if (mode_ != CollectiveRun::Auto) return false;
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor * node = ggml_graph_node(gf, i);
        if (ggml_cluster_allreduce_info(node, nullptr, nullptr)) return ggml_backend_supports_op(backend_, node);
    }
    return true;  // no collectives at all
}

void MetaExecutor::split(ggml_cgraph * gf) {
    segments_.clear();
    const int n = ggml_graph_n_nodes(gf);
    int n_collectives = 0;
    for (int i = 0; i < n; ++i) n_collectives += ggml_cluster_allreduce_info(ggml_graph_node(gf, i), nullptr, nullptr);
    ggml_init_params params = {(size_t) (n_collectives + 1) * ggml_graph_overhead_custom((size_t) n, false), nullptr,
                               true};
    ctx_.reset(ggml_init(params));
    if (!ctx_) throw Error("out of memory splitting a graph at its collectives");
    Segment seg;
    seg.graph = ggml_new_graph_custom(ctx_.get(), (size_t) n, false);
    for (int i = 0; i < n; ++i) {
        ggml_tensor * node = ggml_graph_node(gf, i);
        if (ggml_cluster_allreduce_info(node, nullptr, nullptr)) {
            seg.collective = node;
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
    cached_graph_ = gf;
    cached_n_nodes_ = n;
    splits_built_++;
}

ggml_status MetaExecutor::compute(ggml_cgraph * gf) {
    if (runs_in_graph(gf)) return ggml_backend_graph_compute(backend_, gf);
    if (gf != cached_graph_ || ggml_graph_n_nodes(gf) != cached_n_nodes_) split(gf);
    for (const Segment & seg : segments_) {
        if (ggml_graph_n_nodes(seg.graph) > 0) {
            const ggml_status st = ggml_backend_graph_compute(backend_, seg.graph);
            if (st != GGML_STATUS_SUCCESS) return st;
        }
        if (seg.collective) run_collective(seg.collective);
    }
    return GGML_STATUS_SUCCESS;
}

void MetaExecutor::run_collective(ggml_tensor * node) {
    ggml_cluster_allreduce_fn fn = nullptr;
    void * user = nullptr;
    ggml_cluster_allreduce_info(node, &fn, &user);
    ggml_backend_synchronize(backend_);
    const size_t n = (size_t) ggml_nelements(node);
    ggml_backend_buffer_t buffer = node->view_src ? node->view_src->buffer : node->buffer;
    const bool readable = device_memory_ || (buffer && ggml_backend_buffer_is_host(buffer));
    if (mode_ != CollectiveRun::SegmentsThroughHost && readable) {
        fn(user, node->data, n, nullptr);
        return;
    }
    staging_.resize(ggml_nbytes(node));
    ggml_backend_tensor_get(node, staging_.data(), 0, staging_.size());
    fn(user, staging_.data(), n, nullptr);
    ggml_backend_tensor_set(node, staging_.data(), 0, staging_.size());
}

}  // namespace llama_tp
