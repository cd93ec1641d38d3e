// ggml_ext_exact_sum / ggml_ext_exact_round on the CPU: the rounded sum of
// float parts is the float nearest their exact sum, whatever order the parts
// come in and however many nodes they take; an F64 collective node between
// the two passes its values and element count to the callback; and the meta
// executor runs the nodes between graph segments (as on a GPU) with the same
// bits, through a device's kernels, the host, or host copies.

#include "ggml-ext/ops/collective.h"
#include "ggml-ext/ops/exact_sum.h"
#include "ggml-ext/exec/segment_executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

namespace {

constexpr int64_t kRows = 37, kCols = 5;  // 185 elements: uneven shares for every thread count

struct Context {
    ggml_context * ctx;
    Context() {
        ggml_init_params params = {64u << 20, nullptr, false};
        ctx = ggml_init(params);
    }
    ~Context() { ggml_free(ctx); }
};

// Parts of mixed sign spanning 2^-12 to 2^12, so float sums in different
// orders round differently while every double sum stays exact.
std::vector<ggml_tensor *> random_parts(ggml_context * ctx, int n_parts, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-12, 12);
    std::vector<ggml_tensor *> parts;
    for (int p = 0; p < n_parts; ++p) {
        ggml_tensor * t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kRows, kCols);
        float * x = static_cast<float *>(t->data);
        for (int64_t i = 0; i < ggml_nelements(t); ++i) x[i] = std::ldexp(value(rng), exponent(rng));
        parts.push_back(t);
    }
    return parts;
}

ggml_tensor * exact_sum(ggml_context * ctx, std::vector<ggml_tensor *> parts) {
    return ggml_ext_exact_sum(ctx, parts.data(), (int) parts.size());
}

std::vector<float> compute(ggml_context * ctx, ggml_tensor * out, int threads) {
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    EXPECT_EQ(ggml_graph_compute_with_ctx(ctx, gf, threads), GGML_STATUS_SUCCESS);
    const float * y = static_cast<const float *>(out->data);
    return std::vector<float>(y, y + ggml_nelements(out));
}

TEST(ExactSum, AnyOrderGivesTheNearestFloatToTheExactSum) {
    for (const int threads : {1, 2, 3}) {
        SCOPED_TRACE("threads=" + std::to_string(threads));
        Context c;
        // 23 parts: three nodes (9 + 8 + 6).
        const std::vector<ggml_tensor *> parts = random_parts(c.ctx, 23, 11);
        std::vector<ggml_tensor *> reversed(parts.rbegin(), parts.rend());
        std::vector<ggml_tensor *> shuffled = parts;
        std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(5));
        const std::vector<float> a = compute(c.ctx, ggml_ext_exact_round(c.ctx, exact_sum(c.ctx, parts)), threads);
        const std::vector<float> b = compute(c.ctx, ggml_ext_exact_round(c.ctx, exact_sum(c.ctx, reversed)), threads);
        const std::vector<float> s = compute(c.ctx, ggml_ext_exact_round(c.ctx, exact_sum(c.ctx, shuffled)), threads);
        size_t wrong = 0, float_orders_differ = 0;
        for (int64_t i = 0; i < kRows * kCols; ++i) {
            double exact = 0.0;
            float forward = 0.0f, backward = 0.0f;
            for (ggml_tensor * p : parts) {
                exact += static_cast<const float *>(p->data)[i];
                forward += static_cast<const float *>(p->data)[i];
            }
            for (ggml_tensor * p : reversed) backward += static_cast<const float *>(p->data)[i];
            wrong += a[i] != (float) exact || b[i] != a[i] || s[i] != a[i];
            float_orders_differ += forward != backward;
        }
        EXPECT_EQ(wrong, 0u);
        // The parts are hard enough that plain float sums depend on the order.
        EXPECT_GT(float_orders_differ, 0u);
    }
}

TEST(ExactSum, OnePartRoundTripsExactly) {
    Context c;
    const std::vector<ggml_tensor *> parts = random_parts(c.ctx, 1, 3);
    const std::vector<float> y = compute(c.ctx, ggml_ext_exact_round(c.ctx, exact_sum(c.ctx, parts)), 2);
    EXPECT_EQ(0, std::memcmp(y.data(), parts[0]->data, y.size() * sizeof(float)));
}

// A stand-in for a group of two ranks holding the same values: doubles them.
struct Call {
    int calls = 0;
    size_t n = 0;
};

void twice(void * user, void * data, ggml_type type, size_t n, void *) {
    Call * call = static_cast<Call *>(user);
    EXPECT_EQ(type, GGML_TYPE_F64);
    call->calls++;
    call->n = n;
    double * x = static_cast<double *>(data);
    for (size_t i = 0; i < n; ++i) x[i] *= 2.0;
}

TEST(ExactSum, F64CollectiveNodeRunsBetweenAddAndRound) {
    Context c;
    const std::vector<ggml_tensor *> parts = random_parts(c.ctx, 3, 7);
    Call call;
    ggml_tensor * reduced = ggml_cluster_allreduce(c.ctx, exact_sum(c.ctx, parts), twice, &call);
    const std::vector<float> y = compute(c.ctx, ggml_ext_exact_round(c.ctx, reduced), 2);
    EXPECT_EQ(call.calls, 1);
    EXPECT_EQ(call.n, (size_t) (kRows * kCols));
    size_t wrong = 0;
    for (int64_t i = 0; i < kRows * kCols; ++i) {
        double exact = 0.0;
        for (ggml_tensor * p : parts) exact += static_cast<const float *>(p->data)[i];
        wrong += y[i] != (float) (2.0 * exact);
    }
    EXPECT_EQ(wrong, 0u);
}

// A stand-in for a device's kernels: the host's arithmetic, counted.
struct CountingKernels final : llama_tp::ExactSumKernels {
    int *sums, *rounds;
    CountingKernels(int * s, int * r) : sums(s), rounds(r) {}
    void sum(const float * const * parts, int n_parts, double * out, bool accumulate, size_t n, void *) override {
        ++*sums;
        llama_tp::exact_sum_range(parts, n_parts, out, accumulate, 0, n);
    }
    void round(const double * in, float * out, size_t n, void *) override {
        ++*rounds;
        llama_tp::exact_round_range(in, out, 0, n);
    }
};

// 20 parts (three sum nodes: 8, 7 and 5 parts) and the rounding, in a CPU
// backend's buffer, run by a segment executor in each mode.
struct ExecutorCase {
    ggml_context * ctx = nullptr;
    ggml_backend_t backend = ggml_backend_cpu_init();
    ggml_backend_buffer_t buffer = nullptr;
    ggml_cgraph * gf = nullptr;
    ggml_tensor * out = nullptr;
    std::vector<float> expected;

    ExecutorCase() {
        Context values;
        const std::vector<ggml_tensor *> host_parts = random_parts(values.ctx, 20, 11);
        ggml_init_params params = {4u << 20, nullptr, true};
        ctx = ggml_init(params);
        std::vector<ggml_tensor *> parts;
        for (size_t j = 0; j < host_parts.size(); ++j)
            parts.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kRows, kCols));
        out = ggml_ext_exact_round(ctx, exact_sum(ctx, parts));
        gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, out);
        buffer = ggml_backend_alloc_ctx_tensors(ctx, backend);
        for (size_t j = 0; j < parts.size(); ++j) {
            ggml_backend_tensor_set(parts[j], host_parts[j]->data, 0, ggml_nbytes(parts[j]));
        }
        for (int64_t i = 0; i < kRows * kCols; ++i) {
            double exact = 0.0;
            for (ggml_tensor * p : host_parts) exact += static_cast<const float *>(p->data)[i];
            expected.push_back((float) exact);
        }
    }
    ~ExecutorCase() {
        ggml_backend_buffer_free(buffer);
        ggml_backend_free(backend);
        ggml_free(ctx);
    }
    std::vector<float> run(llama_tp::SegmentExecutor & executor) {
        EXPECT_EQ(executor.compute(gf), GGML_STATUS_SUCCESS);
        std::vector<float> y((size_t) ggml_nelements(out));
        ggml_backend_tensor_get(out, y.data(), 0, y.size() * sizeof(float));
        return y;
    }
};

TEST(ExactSum, SegmentExecutorRunsTheNodesBetweenSegmentsWithTheSameBits) {
    ExecutorCase c;
    llama_tp::SegmentExecutor in_graph(c.backend);
    EXPECT_EQ(c.run(in_graph), c.expected);
    EXPECT_EQ(in_graph.n_segments(), 0u) << "the CPU backend runs the nodes in its graph";

    int sums = 0, rounds = 0;
    llama_tp::SegmentExecutor device(c.backend, llama_tp::CollectiveRun::Segments, false,
                                     std::make_unique<CountingKernels>(&sums, &rounds));
    for (int step = 0; step < 2; ++step) EXPECT_EQ(c.run(device), c.expected);
    EXPECT_EQ(device.n_segments(), 5u) << "three sums and the rounding, each between segments";
    EXPECT_EQ(device.splits_built(), 1);
    EXPECT_EQ(sums, 6);
    EXPECT_EQ(rounds, 2);

    llama_tp::SegmentExecutor host(c.backend, llama_tp::CollectiveRun::Segments);
    EXPECT_EQ(c.run(host), c.expected);
    sums = rounds = 0;
    llama_tp::SegmentExecutor copies(c.backend, llama_tp::CollectiveRun::SegmentsThroughHost, false,
                                     std::make_unique<CountingKernels>(&sums, &rounds));
    EXPECT_EQ(c.run(copies), c.expected);
    EXPECT_EQ(sums + rounds, 0) << "host copies, not the device's kernels";
}

}  // namespace
