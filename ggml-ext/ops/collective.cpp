#include "ggml-ext/ops/collective.h"

#include <cstring>

namespace {

// The callback and its user pointer live in the op_params of a small
// companion tensor that is the node's second source: they stay valid as
// long as the graph's context does, and a reader of the graph finds them.
struct CollectiveCall {
    ggml_cluster_allreduce_fn fn;
    void * user;
};
static_assert(sizeof(CollectiveCall) <= sizeof(((ggml_tensor *) nullptr)->op_params), "op_params too small");

constexpr const char * kCallName = "cluster_allreduce_call";

const CollectiveCall * call_of(const ggml_tensor * node) {
    if (node->op != GGML_OP_CUSTOM || !node->src[1]) return nullptr;
    if (std::strcmp(node->src[1]->name, kCallName) != 0) return nullptr;
    return reinterpret_cast<const CollectiveCall *>(node->src[1]->op_params);
}

// Runs on one thread of the rank's CPU pool (n_tasks = 1).
void run_on_cpu(ggml_tensor * dst, int ith, int, void *) {
    if (ith != 0) return;
    const CollectiveCall * call = call_of(dst);
    call->fn(call->user, dst->data, (size_t) ggml_nelements(dst), nullptr);
}

}  // namespace

extern "C" {

ggml_tensor * ggml_cluster_allreduce(ggml_context * ctx, ggml_tensor * a, ggml_cluster_allreduce_fn fn, void * user) {
    GGML_ASSERT((a->type == GGML_TYPE_F32 || a->type == GGML_TYPE_F64) && ggml_is_contiguous(a));
    ggml_tensor * call = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 1);
    ggml_set_name(call, kCallName);
    const CollectiveCall c{fn, user};
    std::memcpy(call->op_params, &c, sizeof(c));
    ggml_tensor * args[1] = {call};
    ggml_tensor * node = ggml_custom_inplace(ctx, a, args, 1, run_on_cpu, 1, nullptr);
    ggml_format_name(node, "allreduce(%s)", a->name);
    return node;
}

bool ggml_cluster_allreduce_info(const ggml_tensor * node, ggml_cluster_allreduce_fn * fn, void ** user) {
    const CollectiveCall * call = call_of(node);
    if (!call) return false;
    if (fn) *fn = call->fn;
    if (user) *user = call->user;
    return true;
}
}
