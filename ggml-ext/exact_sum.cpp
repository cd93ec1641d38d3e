#include "ggml-ext/exact_sum.h"

#include <algorithm>
#include <cstdint>

namespace {

// This thread's share [begin, end) of n elements.
struct Share {
    int64_t begin, end;
    Share(int64_t n, int ith, int nth) : begin(n * ith / nth), end(n * (ith + 1) / nth) {}
};

void widen(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor * part = dst->src[0];
    const float * src = static_cast<const float *>(part->data);
    double * out = static_cast<double *>(dst->data);
    const Share s(ggml_nelements(dst), ith, nth);
    for (int64_t i = s.begin; i < s.end; ++i) out[i] = (double) src[i];
}

void accumulate(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor * part = dst->src[1];
    const float * src = static_cast<const float *>(part->data);
    double * out = static_cast<double *>(dst->data);
    const Share s(ggml_nelements(dst), ith, nth);
    for (int64_t i = s.begin; i < s.end; ++i) out[i] += (double) src[i];
}

void round_to_float(ggml_tensor * dst, int ith, int nth, void *) {
    const double * src = static_cast<const double *>(dst->src[0]->data);
    float * out = static_cast<float *>(dst->data);
    const Share s(ggml_nelements(dst), ith, nth);
    for (int64_t i = s.begin; i < s.end; ++i) out[i] = (float) src[i];
}

}  // namespace

extern "C" {

ggml_tensor * ggml_ext_exact_add(ggml_context * ctx, ggml_tensor * acc, ggml_tensor * part) {
    GGML_ASSERT(part->type == GGML_TYPE_F32 && ggml_is_contiguous(part));
    ggml_tensor * args[1] = {part};
    if (!acc) {
        return ggml_custom_4d(ctx, GGML_TYPE_F64, part->ne[0], part->ne[1], part->ne[2], part->ne[3], args, 1, widen,
                              GGML_N_TASKS_MAX, nullptr);
    }
    GGML_ASSERT(acc->type == GGML_TYPE_F64 && ggml_is_contiguous(acc) && ggml_are_same_shape(acc, part));
    return ggml_custom_inplace(ctx, acc, args, 1, accumulate, GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor * ggml_ext_exact_round(ggml_context * ctx, ggml_tensor * acc) {
    GGML_ASSERT(acc->type == GGML_TYPE_F64 && ggml_is_contiguous(acc));
    ggml_tensor * args[1] = {acc};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, acc->ne[0], acc->ne[1], acc->ne[2], acc->ne[3], args, 1, round_to_float,
                          GGML_N_TASKS_MAX, nullptr);
}
}
