// The runtime plan resolved from options, facts and an environment, with no
// model loaded: where the ranks' operations, sums, engine and collectives
// come from.
#include "runtime/error.h"
#include "runtime/plan/runtime_plan.h"

#include <functional>
#include <map>

#include <gtest/gtest.h>

namespace llama_tp {
namespace {

std::string error_of(const std::function<void()> & f) {
    try {
        f();
    } catch (const Error & e) {
        return e.what();
    }
    return "";
}

Environment env_of(std::map<std::string, std::string> values) {
    return Environment(std::move(values));
}

PlanFacts cpu_ranks(int n, bool one_pass = true) {
    PlanFacts f;
    f.row_parallel_in_one_pass = one_pass;
    f.one_pass_faster = true;
    f.one_pass_kernel = "test";
    for (int i = 0; i < n; ++i) f.devices.push_back({"CPU", true, -1});
    return f;
}

PlanFacts gpu_ranks(int n) {
    PlanFacts f = cpu_ranks(0, true);
    for (int i = 0; i < n; ++i) f.devices.push_back({"CUDA" + std::to_string(i), false, i});
    return f;
}

EngineOptions tp(int n) {
    EngineOptions o;
    o.tp = n;
    return o;
}

// An engine that only answers what it can do.
class EngineStandIn final : public AllReduceEngine {
  public:
    EngineStandIn(bool on_stream, bool replays) : on_stream_(on_stream), replays_(replays) {}
    const char * name() const override { return "stand-in"; }
    int n_ranks() const override { return 2; }
    std::string joins() const override { return "2 stand-in ranks"; }
    bool rounds_to_bf16() const override { return false; }
    void allreduce(int, float *, size_t) override {}
    void allreduce(int, double *, size_t) override {}
    bool runs_on_stream() const override { return on_stream_; }
    bool sums_replay_in_graphs() const override { return replays_; }
    bool failed() const override { return false; }
    std::string error() const override { return ""; }
    void abort(const std::string &) override {}

  private:
    bool on_stream_, replays_;
};

TEST(RuntimePlan, CpuRanksUseHostOperationsAndSumInTheGraph) {
    const RuntimePlan p = resolve_runtime(tp(2), cpu_ranks(2), Environment());
    EXPECT_TRUE(p.host_ops());
    EXPECT_EQ(p.collectives(nullptr), CollectivePath::InGraph);
    EXPECT_TRUE(p.split_invariant) << "free where every row-parallel matrix takes one pass";
    EXPECT_TRUE(p.one_pass_products) << "where the kernel is faster on this CPU";
    EXPECT_EQ(p.allreduce.memory, RankMemory::Host);
    EXPECT_EQ(p.allreduce.n_ranks, 2);
    EXPECT_EQ(p.allreduce.wire, WireType::F32) << "split-invariant sums cross in F32";
}

TEST(RuntimePlan, FloatSumsWhereSplitInvariantSumsWouldCost) {
    RuntimePlan p = resolve_runtime(tp(2), cpu_ranks(2, false), Environment());
    EXPECT_FALSE(p.split_invariant);
    EXPECT_FALSE(p.one_pass_products);
    ASSERT_EQ(p.log.size(), 1u);
    EXPECT_NE(p.log[0].find("float sums"), std::string::npos) << p.log[0];
    EngineOptions bf16 = tp(2);
    bf16.allreduce_wire = WireType::BF16;
    EXPECT_FALSE(resolve_runtime(bf16, cpu_ranks(2), Environment()).split_invariant) << "a BF16 wire rounds them";
    bf16.split_invariant = true;
    const std::string e = error_of([&] { resolve_runtime(bf16, cpu_ranks(2), Environment()); });
    EXPECT_NE(e.find("--split-invariant needs exact sums and --bf16-wire rounds them"), std::string::npos) << e;
}

TEST(RuntimePlan, OnePassProductsAsAskedOrAsTheEnvironmentSays) {
    EXPECT_FALSE(resolve_runtime(tp(1), cpu_ranks(1), env_of({{"LLAMA_TP_ONE_PASS_PRODUCTS", "0"}})).one_pass_products);
    PlanFacts slower = cpu_ranks(1);
    slower.one_pass_faster = false;
    EXPECT_FALSE(resolve_runtime(tp(1), slower, Environment()).one_pass_products);
    EXPECT_TRUE(resolve_runtime(tp(1), slower, env_of({{"LLAMA_TP_ONE_PASS_PRODUCTS", "1"}})).one_pass_products);
    EngineOptions asked = tp(1);
    asked.one_pass_products = false;
    EXPECT_FALSE(resolve_runtime(asked, cpu_ranks(1), Environment()).one_pass_products) << "the option wins";
    const std::string e = error_of([] {
        resolve_runtime(tp(1), cpu_ranks(1), env_of({{"LLAMA_TP_ONE_PASS_PRODUCTS", "yes"}}));
    });
    EXPECT_NE(e.find("LLAMA_TP_ONE_PASS_PRODUCTS must be 0 or 1, not 'yes'"), std::string::npos) << e;
}

TEST(RuntimePlan, GpuRanksUseGgmlOperationsAndWaitOnTheHostByDefault) {
    const RuntimePlan p = resolve_runtime(tp(2), gpu_ranks(2), Environment());
    EXPECT_EQ(p.ops, RankOps::GgmlOnly);
    EXPECT_FALSE(p.split_invariant) << "asked for only on GPUs";
    EXPECT_EQ(p.allreduce.memory, RankMemory::Cuda);
    EXPECT_EQ(p.allreduce.cuda_devices, (std::vector<int>{0, 1}));
    EXPECT_FALSE(p.allreduce.wire.has_value()) << "the GPU engines choose their wire";
    const EngineStandIn stream(true, true);
    EXPECT_EQ(p.collectives(&stream), CollectivePath::HostWaits);
    EXPECT_EQ(p.collectives(nullptr), CollectivePath::HostWaits) << "one GPU rank";
}

TEST(RuntimePlan, PortableGraphsGoThroughHostMemory) {
    EngineOptions o = tp(2);
    o.portable_graph = true;
    const RuntimePlan p = resolve_runtime(o, cpu_ranks(2), Environment());
    EXPECT_EQ(p.ops, RankOps::GgmlOnly);
    EXPECT_EQ(p.collectives(nullptr), CollectivePath::ThroughHost);
    EXPECT_EQ(resolve_runtime(o, gpu_ranks(2), Environment()).allreduce.memory, RankMemory::Host);
}

TEST(RuntimePlan, CollectivesGoOnTheStreamsOnlyWhenAsked) {
    EXPECT_FALSE(stream_collectives_asked(Environment())) << "host waits by default";
    const Environment on = env_of({{"LLAMA_TP_STREAM_COLLECTIVES", "1"}});
    EXPECT_TRUE(stream_collectives_asked(on));
    EXPECT_FALSE(stream_collectives_asked(env_of({{"LLAMA_TP_STREAM_COLLECTIVES", "0"}})));
    const RuntimePlan p = resolve_runtime(tp(2), gpu_ranks(2), on);
    const EngineStandIn stream(true, false), host(false, false);
    EXPECT_EQ(p.collectives(&stream), CollectivePath::OnStream);
    EXPECT_EQ(p.collectives(&host), CollectivePath::HostWaits) << "an engine of host memory cannot";
    const std::string e = error_of([] { stream_collectives_asked(env_of({{"LLAMA_TP_STREAM_COLLECTIVES", "yes"}})); });
    EXPECT_NE(e.find("LLAMA_TP_STREAM_COLLECTIVES must be 0 or 1, not 'yes'"), std::string::npos) << e;
}

TEST(RuntimePlan, StepsAreCapturedOnlyWhenAskedAndTheEngineReplays) {
    EXPECT_FALSE(graph_capture_asked(Environment())) << "off by default";
    EXPECT_TRUE(graph_capture_asked(env_of({{"GGML_CUDA_COLLECTIVE_GRAPH_CAPTURE", "1"}}))) << "upstream's name";
    EXPECT_FALSE(graph_capture_asked(
        env_of({{"GGML_CUDA_COLLECTIVE_GRAPH_CAPTURE", "1"}, {"LLAMA_TP_COLLECTIVE_GRAPH_CAPTURE", "0"}})))
        << "ours before upstream's";
    const Environment on = env_of({{"LLAMA_TP_COLLECTIVE_GRAPH_CAPTURE", "1"}});
    const RuntimePlan p = resolve_runtime(tp(2), gpu_ranks(2), on);
    EXPECT_EQ(p.allreduce.gpu_sizes.internal_copy_min_bytes, 0u) << "the copy engines cannot be replayed";
    const EngineStandIn replays(true, true), no_replay(true, false);
    EXPECT_EQ(p.collectives(&replays), CollectivePath::Captured);
    EXPECT_EQ(p.collectives(&no_replay), CollectivePath::HostWaits);
    EXPECT_EQ(resolve_runtime(tp(2), cpu_ranks(2), on).collectives(&replays), CollectivePath::InGraph);
    const std::string e = error_of([] { graph_capture_asked(env_of({{"LLAMA_TP_COLLECTIVE_GRAPH_CAPTURE", "on"}})); });
    EXPECT_NE(e.find("LLAMA_TP_COLLECTIVE_GRAPH_CAPTURE must be 0 or 1, not 'on'"), std::string::npos) << e;
}

TEST(RuntimePlan, TheEngineComesFromTheOptionThenTheEnvironment) {
    const Environment env({{"LLAMA_TP_ALLREDUCE", "butterfly"}, {"LLAMA_TP_NCCL_BF16_MIN_BYTES", "1M"}});
    const RuntimePlan p = resolve_runtime(tp(2), cpu_ranks(2), env);
    EXPECT_EQ(p.allreduce.engine, "butterfly");
    EXPECT_EQ(p.allreduce.gpu_sizes.nccl_bf16_min_bytes, size_t(1) << 20);
    EngineOptions asked = tp(2);
    asked.allreduce = "cpu";
    EXPECT_EQ(resolve_runtime(asked, cpu_ranks(2), env).allreduce.engine, "cpu") << "a flag beats the environment";
}

}  // namespace
}  // namespace llama_tp
