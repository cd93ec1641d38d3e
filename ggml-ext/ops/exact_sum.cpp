#include "ggml-ext/ops/exact_sum.h"

#include "ggml-ext/ops/op_params.h"

#include <algorithm>
#include <cstdint>

namespace {

// Every node's companion (ggml-ext/ops/op_params.h) says what the node does,
// so that an executor reading the graph finds it.
constexpr const char * kTagName = "ggml_ext_exact";

// A custom op takes at most GGML_MAX_SRC - 1 sources, one of them the tag;
// the in-place accumulation uses one more for the running sum.
constexpr int kPartsFirstNode = GGML_MAX_SRC - 2;
constexpr int kPartsPerNode = GGML_MAX_SRC - 3;

ggml_tensor * tag(ggml_context * ctx, ggml_ext_exact_op op) {
    return ggml_ext::op_params_tensor(ctx, kTagName, (int32_t) op);
}

// This thread's share [begin, end) of n elements.
struct Share {
    size_t begin, end;
    Share(int64_t n, int ith, int nth) : begin((size_t) (n * ith / nth)), end((size_t) (n * (ith + 1) / nth)) {}
};

// dst (+)= the sum of its parts (ggml_ext_exact_node says which sources).
void add_parts(ggml_tensor * dst, int ith, int nth, void *) {
    int first = 0, n = 0;
    const ggml_ext_exact_op op = ggml_ext_exact_node(dst, &first, &n);
    const float * parts[GGML_MAX_SRC];
    for (int j = 0; j < n; ++j) parts[j] = static_cast<const float *>(dst->src[first + j]->data);
    const Share s(ggml_nelements(dst), ith, nth);
    llama_tp::exact_sum_range(parts, n, static_cast<double *>(dst->data), op == GGML_EXT_EXACT_ACCUMULATE, s.begin,
                              s.end);
}

void round_to_float(ggml_tensor * dst, int ith, int nth, void *) {
    const Share s(ggml_nelements(dst), ith, nth);
    llama_tp::exact_round_range(static_cast<const double *>(dst->src[0]->data), static_cast<float *>(dst->data),
                                s.begin, s.end);
}

}  // namespace

extern "C" {

ggml_tensor * ggml_ext_exact_sum(ggml_context * ctx, ggml_tensor ** parts, int n_parts) {
    GGML_ASSERT(n_parts >= 1);
    for (int j = 0; j < n_parts; ++j) {
        GGML_ASSERT(parts[j]->type == GGML_TYPE_F32 && ggml_is_contiguous(parts[j]) &&
                    ggml_are_same_shape(parts[j], parts[0]));
    }
    const ggml_tensor * p = parts[0];
    ggml_tensor * args[GGML_MAX_SRC];
    int n = std::min(n_parts, kPartsFirstNode);
    std::copy(parts, parts + n, args);
    args[n] = tag(ctx, GGML_EXT_EXACT_SUM);
    ggml_tensor * acc = ggml_custom_4d(ctx, GGML_TYPE_F64, p->ne[0], p->ne[1], p->ne[2], p->ne[3], args, n + 1,
                                       add_parts, GGML_N_TASKS_MAX, nullptr);
    for (int done = n; done < n_parts; done += n) {
        n = std::min(n_parts - done, kPartsPerNode);
        std::copy(parts + done, parts + done + n, args);
        args[n] = tag(ctx, GGML_EXT_EXACT_ACCUMULATE);
        acc = ggml_custom_inplace(ctx, acc, args, n + 1, add_parts, GGML_N_TASKS_MAX, nullptr);
    }
    return acc;
}

ggml_tensor * ggml_ext_exact_round(ggml_context * ctx, ggml_tensor * acc) {
    GGML_ASSERT(acc->type == GGML_TYPE_F64 && ggml_is_contiguous(acc));
    ggml_tensor * args[2] = {acc, tag(ctx, GGML_EXT_EXACT_ROUND)};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, acc->ne[0], acc->ne[1], acc->ne[2], acc->ne[3], args, 2, round_to_float,
                          GGML_N_TASKS_MAX, nullptr);
}

ggml_ext_exact_op ggml_ext_exact_node(const ggml_tensor * node, int * first_part, int * n_parts) {
    int32_t op = 0;
    if (!ggml_ext::op_params_of(node, kTagName, &op)) return GGML_EXT_EXACT_NONE;
    int last = 0;
    while (last + 1 < GGML_MAX_SRC && node->src[last + 1]) ++last;
    const int first = op == GGML_EXT_EXACT_ACCUMULATE ? 1 : 0;
    if (first_part) *first_part = first;
    if (n_parts) *n_parts = op == GGML_EXT_EXACT_ROUND ? 0 : last - first;  // the rounding's source is no part
    return (ggml_ext_exact_op) op;
}
}

namespace llama_tp {

void exact_sum_range(const float * const * parts, int n_parts, double * out, bool accumulate, size_t begin,
                     size_t end) {
    for (size_t i = begin; i < end; ++i) {
        double sum = accumulate ? out[i] : 0.0;
        for (int j = 0; j < n_parts; ++j) sum += (double) parts[j][i];
        out[i] = sum;
    }
}

void exact_round_range(const double * in, float * out, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) out[i] = (float) in[i];
}

}  // namespace llama_tp
