#include "ggml-ext/exact_sum.h"

#include <algorithm>
#include <cstdint>

namespace {

// Parts one node adds: a custom op takes at most GGML_MAX_SRC - 1 sources,
// and the in-place accumulation uses one of them for the running sum.
constexpr int kPartsPerNode = GGML_MAX_SRC - 2;

// This thread's share [begin, end) of n elements.
struct Share {
    int64_t begin, end;
    Share(int64_t n, int ith, int nth) : begin(n * ith / nth), end(n * (ith + 1) / nth) {}
};

// dst (+)= the sum of dst->src[first..]: first is 0 for a new sum, 1 when
// dst is a view of the running sum src[0]. Parts are added in source order.
template <int first>
void add_parts(ggml_tensor * dst, int ith, int nth, void *) {
    const float * parts[GGML_MAX_SRC];
    int n = 0;
    for (int j = first; j < GGML_MAX_SRC && dst->src[j]; ++j)
        parts[n++] = static_cast<const float *>(dst->src[j]->data);
    double * out = static_cast<double *>(dst->data);
    const Share s(ggml_nelements(dst), ith, nth);
    for (int64_t i = s.begin; i < s.end; ++i) {
        double sum = first ? out[i] : 0.0;
        for (int j = 0; j < n; ++j) sum += (double) parts[j][i];
        out[i] = sum;
    }
}

void round_to_float(ggml_tensor * dst, int ith, int nth, void *) {
    const double * src = static_cast<const double *>(dst->src[0]->data);
    float * out = static_cast<float *>(dst->data);
    const Share s(ggml_nelements(dst), ith, nth);
    for (int64_t i = s.begin; i < s.end; ++i) out[i] = (float) src[i];
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
    int n = std::min(n_parts, kPartsPerNode + 1);
    ggml_tensor * acc = ggml_custom_4d(ctx, GGML_TYPE_F64, p->ne[0], p->ne[1], p->ne[2], p->ne[3], parts, n,
                                       add_parts<0>, GGML_N_TASKS_MAX, nullptr);
    for (int done = n; done < n_parts; done += n) {
        n = std::min(n_parts - done, kPartsPerNode);
        acc = ggml_custom_inplace(ctx, acc, parts + done, n, add_parts<1>, GGML_N_TASKS_MAX, nullptr);
    }
    return acc;
}

ggml_tensor * ggml_ext_exact_round(ggml_context * ctx, ggml_tensor * acc) {
    GGML_ASSERT(acc->type == GGML_TYPE_F64 && ggml_is_contiguous(acc));
    ggml_tensor * args[1] = {acc};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, acc->ne[0], acc->ne[1], acc->ne[2], acc->ne[3], args, 1, round_to_float,
                          GGML_N_TASKS_MAX, nullptr);
}
}
