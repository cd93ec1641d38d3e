#include "ggml-ext/ops/collective.h"

#include "ggml-ext/ops/op_params.h"

namespace {

// The callback and its user pointer (ggml-ext/ops/op_params.h).
struct CollectiveCall {
    ggml_cluster_allreduce_fn fn;
    void * user;
};

constexpr const char * kCallName = "cluster_allreduce_call";

// Runs on one thread of the rank's CPU pool (n_tasks = 1).
void run_on_cpu(ggml_tensor * dst, int ith, int, void *) {
    if (ith != 0) return;
    CollectiveCall call{};
    ggml_ext::op_params_of(dst, kCallName, &call);
    call.fn(call.user, dst->data, dst->type, (size_t) ggml_nelements(dst), nullptr);
}

}  // namespace

extern "C" {

ggml_tensor * ggml_cluster_allreduce(ggml_context * ctx, ggml_tensor * a, ggml_cluster_allreduce_fn fn, void * user) {
    GGML_ASSERT((a->type == GGML_TYPE_F32 || a->type == GGML_TYPE_F64) && ggml_is_contiguous(a));
    ggml_tensor * args[1] = {ggml_ext::op_params_tensor(ctx, kCallName, CollectiveCall{fn, user})};
    ggml_tensor * node = ggml_custom_inplace(ctx, a, args, 1, run_on_cpu, 1, nullptr);
    ggml_format_name(node, "allreduce(%s)", a->name);
    return node;
}

bool ggml_cluster_allreduce_info(const ggml_tensor * node, ggml_cluster_allreduce_fn * fn, void ** user) {
    CollectiveCall call{};
    if (!ggml_ext::op_params_of(node, kCallName, &call)) return false;
    if (fn) *fn = call.fn;
    if (user) *user = call.user;
    return true;
}
}
