// Which device each rank runs on (-dev, -ngl), over a made-up catalog of GPUs
// and over this build's own devices, and the graphs of ggml's operations only
// that GPU ranks run, checked on the CPU.
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/ranks/rank_devices.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>

#include <gtest/gtest.h>

namespace llama_tp {
namespace {

const DeviceCatalog kTwoGpus = {{"CPU", "a CPU", false}, {"CUDA0", "a GPU", true}, {"CUDA1", "a GPU", true}};

std::string error_of(const std::function<void()> & f) {
    try {
        f();
    } catch (const Error & e) {
        return e.what();
    }
    return "";
}

TEST(RankDevices, OneGpuPerRankOfTheHost) {
    const RankDeviceChoice c = choose_rank_device_entries({}, kTwoGpus, 2, 0, 32);
    EXPECT_EQ(c.entries, (std::vector<size_t>{1, 2}));
    // The second process of a host with one rank each takes the second GPU.
    EXPECT_EQ(choose_rank_device_entries({}, kTwoGpus, 1, 1, 32).entries, (std::vector<size_t>{2}));
    DeviceOptions all;
    all.gpu_layers = -2;
    EXPECT_EQ(choose_rank_device_entries(all, kTwoGpus, 2, 0, 32).entries, (std::vector<size_t>{1, 2}));
    all.gpu_layers = 99;  // at least the model's layers: the whole model
    EXPECT_EQ(choose_rank_device_entries(all, kTwoGpus, 2, 0, 32).entries, (std::vector<size_t>{1, 2}));
}

TEST(RankDevices, MoreRanksThanGpusIsRefusedWithTheWayOut) {
    const std::string e = error_of([] { choose_rank_device_entries({}, kTwoGpus, 3, 0, 32); });
    EXPECT_NE(e.find("3 ranks on this host need as many GPUs, and it has 2 (CUDA0, CUDA1)"), std::string::npos) << e;
    EXPECT_NE(e.find("-ngl 0"), std::string::npos) << e;
    EXPECT_NE(error_of([] { choose_rank_device_entries({}, kTwoGpus, 1, 2, 32); }), "");
}

TEST(RankDevices, NoGpuLayersKeepsTheRanksOnTheCpu) {
    DeviceOptions o;
    o.gpu_layers = 0;
    const RankDeviceChoice c = choose_rank_device_entries(o, kTwoGpus, 2, 0, 32);
    EXPECT_EQ(c.entries, (std::vector<size_t>{0, 0}));
    EXPECT_EQ(c.why, "-ngl 0");
    // Without GPUs any -ngl leaves the ranks on the CPU, as upstream ignores it.
    o.gpu_layers = 10;
    const DeviceCatalog cpu_only = {{"CPU", "", false}};
    EXPECT_EQ(choose_rank_device_entries(o, cpu_only, 2, 0, 32).entries, (std::vector<size_t>{0, 0}));
}

TEST(RankDevices, PartOfTheModelOnTheGpusIsRefused) {
    DeviceOptions o;
    o.gpu_layers = 10;
    const std::string e = error_of([&] { choose_rank_device_entries(o, kTwoGpus, 2, 0, 32); });
    EXPECT_NE(e.find("-ngl 10 asks for 10 of the model's 32 layers"), std::string::npos) << e;
}

TEST(RankDevices, NamedDevicesOnePerRankOrOneForAll) {
    DeviceOptions o;
    o.names = {"CUDA1", "CUDA0"};
    EXPECT_EQ(choose_rank_device_entries(o, kTwoGpus, 2, 0, 32).entries, (std::vector<size_t>{2, 1}));
    o.names = {"CUDA1"};
    EXPECT_EQ(choose_rank_device_entries(o, kTwoGpus, 2, 0, 32).entries, (std::vector<size_t>{2, 2}));
    o.names = {"none"};
    EXPECT_EQ(choose_rank_device_entries(o, kTwoGpus, 2, 0, 32).entries, (std::vector<size_t>{0, 0}));
    o.names = {"CUDA0", "CUDA1", "CUDA0"};
    EXPECT_NE(error_of([&] { choose_rank_device_entries(o, kTwoGpus, 2, 0, 32); }).find("names 3 devices for 2 ranks"),
              std::string::npos);
    o.names = {"CUDA7"};
    const std::string e = error_of([&] { choose_rank_device_entries(o, kTwoGpus, 2, 0, 32); });
    EXPECT_NE(e.find("no device 'CUDA7' in this build (devices: CPU, CUDA0, CUDA1)"), std::string::npos) << e;
}

TEST(RankDevices, CudaOrdinalsComeFromTheirNames) {
    const std::string gpu = gpu_device_prefix();  // "CUDA", "ROCm" on a HIP build
    EXPECT_EQ(cuda_ordinal(gpu + "0"), 0);
    EXPECT_EQ(cuda_ordinal(gpu + "12"), 12);
    EXPECT_EQ(cuda_ordinal("CPU"), -1);
    EXPECT_EQ(cuda_ordinal(gpu), -1);
    EXPECT_EQ(cuda_ordinal(gpu + "_Host"), -1);
    EXPECT_EQ(cuda_ordinal("Vulkan0"), -1);
}

TEST(RankDevices, DeviceListsAreParsed) {
    EXPECT_EQ(parse_device_names(" CUDA0, CUDA1"), (std::vector<std::string>{"CUDA0", "CUDA1"}));
    EXPECT_THROW(parse_device_names("CUDA0,,CUDA1"), Error);
    EXPECT_THROW(parse_device_names(""), Error);
}

TEST(RankDevices, ThisBuildRunsRanksOnItsCpu) {
    const RankDevices d = choose_rank_devices({}, 2, 0, 5);
    ASSERT_EQ(d.devices.size(), 2u);
    if (device_catalog().size() == 1) {
        EXPECT_EQ(d.why, "no GPU in this build");
    }
    EXPECT_NE(device_list().find("CPU"), std::string::npos);
}

EngineOptions small_model(int tp) {
    EngineOptions o;
    o.model_path = LLAMA_TP_TEST_MODEL;
    o.n_ctx = 256;
    o.n_seq_max = 2;
    o.n_threads = 2;
    o.tp = tp;
    return o;
}

// The next-token probabilities after a prompt.
std::vector<double> prompt_probs(Engine & e) {
    Batch b;
    for (int i = 0; i < 12; ++i) b.add(1 + (i * 37) % 500, i, 0, i == 11);
    e.decode(b);
    const float * l = e.logits(11);
    const int n = e.info().n_vocab;
    const double top = *std::max_element(l, l + n);
    std::vector<double> p(n);
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += p[i] = std::exp((double) l[i] - top);
    for (double & x : p) x /= sum;
    return p;
}

// GPU ranks' graphs, on CPU ranks: ggml's attention instead of row
// attention, collectives between graph segments through host memory.
TEST(PortableGraph, MatchesTheCpuGraphWithinTheContract) {
    EngineOptions o = small_model(1);
    const std::vector<double> cpu = prompt_probs(*Engine::load(o));
    o.portable_graph = true;
    const std::vector<double> portable1 = prompt_probs(*Engine::load(o));
    EngineOptions o2 = small_model(2);
    o2.portable_graph = true;
    const std::vector<double> portable2 = prompt_probs(*Engine::load(o2));
    double d1 = 0.0, d2 = 0.0;
    for (size_t i = 0; i < cpu.size(); ++i) {
        d1 = std::max(d1, std::fabs(cpu[i] - portable1[i]));
        d2 = std::max(d2, std::fabs(portable1[i] - portable2[i]));
    }
    // max |dp| as the accuracy contract bounds it (DESIGN section 4).
    EXPECT_LE(d1, 1e-3) << "another attention kernel, another order of addition";
    EXPECT_LE(d2, 1e-3) << "float sums across two ranks";
    EXPECT_GT(d2, 0.0) << "two ranks add in another order (or the collective did not run)";
}

// A GPU rank's split-invariant sums: one ggml product per grid cell, the
// cells added in double by the segment executor between graph segments (through
// host copies here, by the GPU's kernels there). Asked for only. (This f32
// model's cells take other ggml kernels at other splits, so its probabilities
// move a little; the accuracy matrix holds q8_0 and f16 models to identical
// probabilities on this path.)
TEST(PortableGraph, SplitInvariantSumsRunBetweenSegments) {
    EngineOptions o = small_model(1);
    o.portable_graph = true;
    o.split_invariant = true;
    const std::vector<double> one = prompt_probs(*Engine::load(o));
    EngineOptions o3 = small_model(3);
    o3.portable_graph = true;
    o3.split_invariant = true;
    std::unique_ptr<Engine> e3 = Engine::load(o3);
    EXPECT_TRUE(e3->options().exact_sums());
    const std::vector<double> three = prompt_probs(*e3);
    double d = 0.0;
    for (size_t i = 0; i < one.size(); ++i) d = std::max(d, std::fabs(one[i] - three[i]));
    EXPECT_LE(d, 1e-4);
    o3.split_invariant.reset();
    EXPECT_FALSE(Engine::load(o3)->options().exact_sums()) << "float sums by default";
}

TEST(RankDevices, AnUnknownDeviceStopsTheLoad) {
    EngineOptions o = small_model(2);
    o.devices.names = {"CUDA0"};
    const std::string e = error_of([&] { Engine::load(o); });
    EXPECT_NE(e.find("no device 'CUDA0'"), std::string::npos) << e;
    o.devices.names = {"CPU"};
    EXPECT_NO_THROW(Engine::load(o));
}

}  // namespace
}  // namespace llama_tp
