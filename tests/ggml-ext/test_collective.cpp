// The collective node's contract, checked with a stand-in two-rank callback:
// it runs after the node producing its input and before the consumer, it
// receives the node's own data pointer and element count, and it runs once
// per graph compute, every compute.

#include "ggml-ext/ops/collective.h"
#include "ggml-ext/error.h"
#include "ggml-ext/exec/graph_fingerprint.h"
#include "ggml-ext/exec/segment_executor.h"

#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "ggml-cpu.h"

namespace {

constexpr int kRanks = 2;
constexpr int kN = 1000;

// Sums two ranks' buffers: each deposits a copy, the last to arrive sums.
struct StandInGroup {
    std::mutex m;
    std::condition_variable cv;
    std::vector<float> slots[kRanks];
    int arrived = 0;
    int generation = 0;
    std::vector<float> sum;
};

struct RankCall {
    StandInGroup * group = nullptr;
    int rank = 0;
    int calls = 0;
    size_t seen_n = 0;
    void * seen_data = nullptr;
    std::vector<float> seen_values;  // the input as the callback saw it
};

void stand_in_allreduce(void * user, void * data, ggml_type type, size_t n, void * stream) {
    auto * call = static_cast<RankCall *>(user);
    EXPECT_EQ(stream, nullptr);
    EXPECT_EQ(type, GGML_TYPE_F32);
    call->calls++;
    call->seen_n = n;
    call->seen_data = data;
    float * f = static_cast<float *>(data);
    call->seen_values.assign(f, f + n);
    StandInGroup & g = *call->group;
    std::unique_lock<std::mutex> lock(g.m);
    g.slots[call->rank].assign(f, f + n);
    const int gen = g.generation;
    if (++g.arrived == kRanks) {
        g.sum.assign(n, 0.0f);
        for (auto & s : g.slots)
            for (size_t i = 0; i < n; ++i) g.sum[i] += s[i];
        g.arrived = 0;
        g.generation++;
        g.cv.notify_all();
    } else {
        g.cv.wait(lock, [&] { return g.generation != gen; });
    }
    std::copy(g.sum.begin(), g.sum.end(), f);
}

struct RankGraph {
    ggml_context_ptr ctx;
    ggml_backend_ptr backend;
    ggml_gallocr_ptr alloc;
    ggml_cgraph * gf = nullptr;
    ggml_tensor * x = nullptr;
    ggml_tensor * reduced = nullptr;
    ggml_tensor * out = nullptr;
};

void build(RankGraph & r, RankCall & call, int n_threads) {
    ggml_init_params p = {64 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
    r.ctx.reset(ggml_init(p));
    r.backend.reset(ggml_backend_cpu_init());
    ggml_backend_cpu_set_n_threads(r.backend.get(), n_threads);
    ggml_context * ctx = r.ctx.get();
    r.x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, kN);
    ggml_set_input(r.x);
    ggml_tensor * produced = ggml_scale(ctx, r.x, 2.0f);  // producer
    r.reduced = ggml_cluster_allreduce(ctx, produced, stand_in_allreduce, &call);
    r.out = ggml_scale_bias(ctx, r.reduced, 1.0f, 1.0f);  // consumer
    ggml_set_output(r.out);
    r.gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(r.gf, r.out);
    r.alloc.reset(ggml_gallocr_new(ggml_backend_cpu_buffer_type()));
    ASSERT_TRUE(ggml_gallocr_alloc_graph(r.alloc.get(), r.gf));
}

using ComputeFn = std::function<ggml_status(int rank)>;

// Runs kComputes steps on both ranks and checks every contract of the node.
// staged: the callback gets a host copy of the node's values, not its storage.
void check_steps(RankGraph * graphs, RankCall * calls, const ComputeFn & compute, bool staged = false) {
    const int kComputes = 5;
    for (int step = 1; step <= kComputes; ++step) {
        std::vector<std::thread> threads;
        for (int r = 0; r < kRanks; ++r) {
            threads.emplace_back([&, r] {
                std::vector<float> x(kN);
                for (int i = 0; i < kN; ++i) x[i] = (float) (i + 1000 * r + step);
                ggml_backend_tensor_set(graphs[r].x, x.data(), 0, sizeof(float) * kN);
                ASSERT_EQ(compute(r), GGML_STATUS_SUCCESS);
            });
        }
        for (auto & t : threads) t.join();

        for (int r = 0; r < kRanks; ++r) {
            EXPECT_EQ(calls[r].calls, step) << "exactly one call per compute";
            EXPECT_EQ(calls[r].seen_n, (size_t) kN);
            if (staged) {
                EXPECT_NE(calls[r].seen_data, graphs[r].reduced->data) << "a copy in host memory";
            } else {
                EXPECT_EQ(calls[r].seen_data, graphs[r].reduced->data) << "the node's own storage";
            }
            // The producer ran before the callback: it saw 2x the input.
            EXPECT_FLOAT_EQ(calls[r].seen_values[7], 2.0f * (float) (7 + 1000 * r + step));
            // The consumer ran after: it saw the sum across ranks.
            std::vector<float> out(kN);
            ggml_backend_tensor_get(graphs[r].out, out.data(), 0, sizeof(float) * kN);
            for (int i : {0, 7, kN - 1}) {
                const float expected = 2.0f * (float) (i + step) + 2.0f * (float) (i + 1000 + step) + 1.0f;
                EXPECT_FLOAT_EQ(out[i], expected);
            }
        }
    }
}

void setup(StandInGroup & group, RankCall * calls, RankGraph * graphs) {
    for (int r = 0; r < kRanks; ++r) {
        calls[r].group = &group;
        calls[r].rank = r;
        build(graphs[r], calls[r], 2);
    }
}

TEST(CollectiveNode, SegmentedExecutionKeepsTheContractAndCachesTheSplit) {
    StandInGroup group;
    RankCall calls[kRanks];
    RankGraph graphs[kRanks];
    setup(group, calls, graphs);
    std::vector<std::unique_ptr<llama_tp::SegmentExecutor>> executors;
    for (int r = 0; r < kRanks; ++r) {
        executors.push_back(
            std::make_unique<llama_tp::SegmentExecutor>(graphs[r].backend.get(), llama_tp::CollectiveRun::Segments));
    }
    check_steps(graphs, calls, [&](int r) { return executors[r]->compute(graphs[r].gf); });
    for (int r = 0; r < kRanks; ++r) {
        EXPECT_EQ(executors[r]->splits_built(), 1) << "the split is built once and reused";
        EXPECT_EQ(executors[r]->n_segments(), 2u);
    }
}

// As for a backend whose memory the host cannot read (a GPU's).
TEST(CollectiveNode, SegmentedExecutionThroughHostMemory) {
    StandInGroup group;
    RankCall calls[kRanks];
    RankGraph graphs[kRanks];
    setup(group, calls, graphs);
    std::vector<std::unique_ptr<llama_tp::SegmentExecutor>> executors;
    for (int r = 0; r < kRanks; ++r) {
        executors.push_back(std::make_unique<llama_tp::SegmentExecutor>(graphs[r].backend.get(),
                                                                        llama_tp::CollectiveRun::SegmentsThroughHost));
    }
    check_steps(
        graphs, calls, [&](int r) { return executors[r]->compute(graphs[r].gf); }, /*staged =*/true);
    EXPECT_EQ(executors[0]->splits_built(), 1);
}

TEST(CollectiveNode, InGraphOnTheCpuBackend) {
    StandInGroup group;
    RankCall calls[kRanks];
    RankGraph graphs[kRanks];
    setup(group, calls, graphs);
    std::vector<std::unique_ptr<llama_tp::SegmentExecutor>> executors;
    for (int r = 0; r < kRanks; ++r)
        executors.push_back(std::make_unique<llama_tp::SegmentExecutor>(graphs[r].backend.get()));
    check_steps(graphs, calls, [&](int r) { return executors[r]->compute(graphs[r].gf); });
    EXPECT_EQ(executors[0]->splits_built(), 0) << "the CPU backend runs the node in-graph: nothing to split";
}

TEST(CollectiveNode, RunsBetweenProducerAndConsumerOncePerCompute) {
    StandInGroup group;
    RankCall calls[kRanks];
    RankGraph graphs[kRanks];
    setup(group, calls, graphs);

    ggml_cluster_allreduce_fn fn = nullptr;
    void * user = nullptr;
    ASSERT_TRUE(ggml_cluster_allreduce_info(graphs[0].reduced, &fn, &user));
    EXPECT_EQ(fn, &stand_in_allreduce);
    EXPECT_EQ(user, &calls[0]);
    EXPECT_FALSE(ggml_cluster_allreduce_info(graphs[0].out, nullptr, nullptr));

    check_steps(graphs, calls,
                [&](int r) { return ggml_backend_graph_compute(graphs[r].backend.get(), graphs[r].gf); });
}

// An operation's first parameter (ggml_scale's factor).
float first_param(const ggml_tensor * t) {
    float v;
    std::memcpy(&v, t->op_params, sizeof v);
    return v;
}
void set_first_param(ggml_tensor * t, float v) {
    std::memcpy(t->op_params, &v, sizeof v);
}

std::vector<int64_t> fingerprint(ggml_cgraph * gf) {
    std::vector<int64_t> out;
    llama_tp::graph_fingerprint(gf, out);
    return out;
}

TEST(GraphFingerprint, SameGraphSameMemoryOnly) {
    StandInGroup group;
    RankCall calls[kRanks];
    RankGraph graphs[kRanks];
    setup(group, calls, graphs);
    const std::vector<int64_t> first = fingerprint(graphs[0].gf);
    EXPECT_EQ(fingerprint(graphs[0].gf), first) << "a graph is its own";
    EXPECT_NE(fingerprint(graphs[1].gf), first) << "another rank's memory";
    ggml_tensor * scaled = graphs[0].reduced->src[0];
    const float scale = first_param(scaled);
    set_first_param(scaled, 3.0f);
    EXPECT_NE(fingerprint(graphs[0].gf), first) << "an operation's parameter";
    set_first_param(scaled, scale);
    void * data = graphs[0].out->data;
    graphs[0].out->data = static_cast<char *>(data) + 64;
    EXPECT_NE(fingerprint(graphs[0].gf), first) << "a node's memory";
    graphs[0].out->data = data;
    EXPECT_EQ(fingerprint(graphs[0].gf), first);
}

// Stand-ins for a GPU rank's stream work: the bridge hands out no stream
// (the CPU backend ran the segment already), the capture counts its calls.
struct NoStreamBridge final : llama_tp::StreamBridge {
    void * enter() override { return nullptr; }
    void leave() override {}
};
struct NoExactKernels final : llama_tp::ExactSumKernels {
    void sum(const float * const *, int, double *, bool, size_t, void *) override {}
    void round(const double *, float *, size_t, void *) override {}
};
struct CountingCapture final : llama_tp::StepCapture {
    int *begun = nullptr, *launched = nullptr, *abandoned = nullptr, *replayed = nullptr;
    void begin() override { ++*begun; }
    void end_and_launch() override { ++*launched; }
    void abandon() override { ++*abandoned; }
    void replay() override { ++*replayed; }
};

// A rank's collective that needs no other rank: doubles the values, counts its calls.
void doubling_allreduce(void * user, void * data, ggml_type, size_t n, void *) {
    ++*static_cast<int *>(user);
    float * f = static_cast<float *>(data);
    for (size_t i = 0; i < n; ++i) f[i] *= 2.0f;
}

// A shape seen twice in a row is captured the second time and replayed from
// then on while its fingerprint holds; another shape runs as it is.
TEST(CollectiveNode, StepsAreCapturedOnTheSecondRunAndReplayed) {
    ggml_init_params p = {16 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
    ggml_context_ptr ctx(ggml_init(p));
    ggml_backend_ptr backend(ggml_backend_cpu_init());
    int calls = 0;
    ggml_tensor * x = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, kN);
    ggml_set_input(x);
    ggml_tensor * scaled = ggml_scale(ctx.get(), x, 2.0f);
    ggml_tensor * out =
        ggml_scale_bias(ctx.get(), ggml_cluster_allreduce(ctx.get(), scaled, doubling_allreduce, &calls), 1.0f, 1.0f);
    ggml_set_output(out);
    ggml_cgraph * gf = ggml_new_graph(ctx.get());
    ggml_build_forward_expand(gf, out);
    ggml_gallocr_ptr alloc(ggml_gallocr_new(ggml_backend_cpu_buffer_type()));
    ASSERT_TRUE(ggml_gallocr_alloc_graph(alloc.get(), gf));
    const std::vector<float> ones(kN, 1.0f);
    ggml_backend_tensor_set(x, ones.data(), 0, sizeof(float) * kN);

    int begun = 0, launched = 0, abandoned = 0, replayed = 0;
    auto capture = std::make_unique<CountingCapture>();
    capture->begun = &begun;
    capture->launched = &launched;
    capture->abandoned = &abandoned;
    capture->replayed = &replayed;
    llama_tp::SegmentExecutor executor(backend.get(), llama_tp::CollectiveRun::Segments, true,
                                       std::make_unique<NoExactKernels>(), std::make_unique<NoStreamBridge>(),
                                       std::move(capture));
    auto step = [&](int want_calls, int want_begun, int want_replayed, const char * what) {
        ASSERT_EQ(executor.compute(gf), GGML_STATUS_SUCCESS) << what;
        EXPECT_EQ(calls, want_calls) << what;
        EXPECT_EQ(begun, want_begun) << what;
        EXPECT_EQ(launched, want_begun) << what;
        EXPECT_EQ(replayed, want_replayed) << what;
    };
    step(1, 0, 0, "first sight: as it is");
    float value = 0.0f;
    ggml_backend_tensor_get(out, &value, 0, sizeof value);
    EXPECT_EQ(value, 5.0f) << "the collective ran between its producer and its consumer";
    step(2, 1, 0, "the second: captured (its work queued inside the capture)");
    step(2, 1, 1, "then replayed: the collective's work is in the graph");
    step(2, 1, 2, "replayed again");
    set_first_param(scaled, 3.0f);
    step(3, 1, 2, "another fingerprint: as it is");
    step(4, 2, 2, "seen twice: captured again");
    set_first_param(scaled, 2.0f);
    step(5, 2, 2, "the first shape is no longer the one captured");
    EXPECT_EQ(executor.captures(), 2);
    EXPECT_EQ(executor.replays(), 2);
    EXPECT_EQ(executor.collectives_per_replay(), 1);
    set_first_param(scaled, 3.0f);
    step(5, 2, 3, "the second shape, still captured: replayed");
    bool healthy = false;
    executor.replay_only_while([&] { return healthy; });
    step(6, 2, 3, "a failed group: as it is, never replayed");
    healthy = true;
    step(6, 2, 4, "healthy again: the graph captured is replayed");
    EXPECT_EQ(abandoned, 0);
    EXPECT_THROW(
        llama_tp::SegmentExecutor(backend.get(), llama_tp::CollectiveRun::Segments, true,
                                  std::make_unique<NoExactKernels>(), nullptr, std::make_unique<CountingCapture>()),
        llama_tp::Error)
        << "a capture needs the collectives on the stream";
}

}  // namespace
