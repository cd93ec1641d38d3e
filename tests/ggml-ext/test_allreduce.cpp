// AllReduce engines: sums against a double-precision reference, bit-identical
// results across ranks, bf16 wire precision, many small calls, and the
// failure semantics (timeout naming the missing rank, abort, bad calls), plus
// engine selection by name and environment.

#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/comm/allreduce_wire.h"
#include "ggml-ext/comm/process_group.h"
#include "ggml-ext/environment.h"
#include "ggml-ext/error.h"

#include "ggml.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace llama_tp {
namespace {

using Clock = std::chrono::steady_clock;
using Buffers = std::vector<std::vector<float>>;

std::unique_ptr<AllReduceEngine> engine_for(const std::string & name, int n_ranks, WireType wire = WireType::F32,
                                            double timeout_s = 30.0) {
    AllReduceConfig config;
    config.engine = name;
    config.n_ranks = n_ranks;
    config.wire = wire;
    config.timeout_s = timeout_s;
    return make_allreduce_engine(config);
}

// Runs body(rank) on one thread per rank in `ranks` and waits for all of them.
void run_ranks(const std::vector<int> & ranks, const std::function<void(int)> & body) {
    std::vector<std::thread> threads;
    for (const int rank : ranks) threads.emplace_back(body, rank);
    for (std::thread & t : threads) t.join();
}

std::vector<int> all_ranks(int n_ranks) {
    std::vector<int> ranks;
    for (int r = 0; r < n_ranks; ++r) ranks.push_back(r);
    return ranks;
}

// Values of mixed sign and magnitude, so cancellation and rounding both show.
Buffers random_inputs(int n_ranks, size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-8, 8);
    Buffers inputs(n_ranks, std::vector<float>(n));
    for (auto & buffer : inputs) {
        for (float & x : buffer) x = std::ldexp(value(rng), exponent(rng));
    }
    return inputs;
}

Buffers allreduce_all(AllReduceEngine & engine, Buffers buffers) {
    run_ranks(all_ranks((int) buffers.size()),
              [&](int rank) { engine.allreduce(rank, buffers[rank].data(), buffers[rank].size()); });
    return buffers;
}

size_t count_differing_ranks(const Buffers & results) {
    size_t differing = 0;
    for (const auto & result : results) {
        differing += std::memcmp(result.data(), results[0].data(), result.size() * sizeof(float)) != 0;
    }
    return differing;
}

// The relative error bound (on the sum of magnitudes) an engine may show.
double relative_bound(int n_ranks, WireType wire) {
    const double levels = std::ceil(std::log2((double) n_ranks)) + 2;
    return wire == WireType::F32 ? (n_ranks + 1) * std::ldexp(1.0, -23) : levels * std::ldexp(1.0, -8);
}

// Elements whose result is further from the double-precision sum than the bound allows.
size_t count_out_of_tolerance(const Buffers & inputs, const std::vector<float> & result, WireType wire) {
    const double bound = relative_bound((int) inputs.size(), wire);
    size_t bad = 0;
    for (size_t i = 0; i < result.size(); ++i) {
        double sum = 0, magnitude = 0;
        for (const auto & input : inputs) {
            sum += input[i];
            magnitude += std::fabs(input[i]);
        }
        bad += std::fabs(result[i] - sum) > bound * magnitude + 1e-30;
    }
    return bad;
}

const char * wire_name(WireType wire) {
    return wire == WireType::F32 ? "f32" : "bf16";
}

// --- sums -------------------------------------------------------------------

using SumCase = std::tuple<std::string, int, WireType>;

class AllReduceSum : public testing::TestWithParam<SumCase> {};

TEST_P(AllReduceSum, MatchesReferenceAndIsIdenticalAcrossRanks) {
    const auto & [name, n_ranks, wire] = GetParam();
    auto engine = engine_for(name, n_ranks, wire);
    ASSERT_STREQ(engine->name(), name.c_str());
    const size_t sizes[] = {1, 7, 15, 16, 17, 1000, 4095, 4096, 4097, 8191, 8192, 8193, 65537, 1 << 20};
    unsigned seed = 1;
    for (const size_t n : sizes) {
        SCOPED_TRACE("n=" + std::to_string(n));
        const Buffers inputs = random_inputs(n_ranks, n, seed++);
        const Buffers results = allreduce_all(*engine, inputs);
        ASSERT_FALSE(engine->failed()) << engine->error();
        EXPECT_EQ(count_differing_ranks(results), 0u);
        EXPECT_EQ(count_out_of_tolerance(inputs, results[0], wire), 0u);
    }
}

INSTANTIATE_TEST_SUITE_P(Engines, AllReduceSum,
                         testing::Combine(testing::Values("cpu", "butterfly"), testing::Values(2, 3, 4),
                                          testing::Values(WireType::F32, WireType::BF16)),
                         [](const testing::TestParamInfo<SumCase> & info) {
                             return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "ranks_" +
                                    wire_name(std::get<2>(info.param));
                         });

// The cpu engine adds ranks 0..n-1 in order for every element, in f32, each
// contribution first rounded to bf16 on a bf16 wire: exactly this, bit for bit.
std::vector<float> ordered_sum(const Buffers & inputs, WireType wire) {
    auto on_wire = [&](float x) { return wire == WireType::F32 ? x : ggml_bf16_to_fp32(ggml_fp32_to_bf16(x)); };
    std::vector<float> sum(inputs[0].size());
    for (size_t i = 0; i < sum.size(); ++i) {
        float acc = on_wire(inputs[0][i]);
        for (size_t r = 1; r < inputs.size(); ++r) acc += on_wire(inputs[r][i]);
        sum[i] = acc;
    }
    return sum;
}

TEST(AllReduceCpu, SumsRanksInOrderBitForBit) {
    for (const WireType wire : {WireType::F32, WireType::BF16}) {
        for (const int n_ranks : {2, 3, 4}) {
            auto engine = engine_for("cpu", n_ranks, wire);
            for (const size_t n : {size_t(1000), size_t(12345)}) {
                SCOPED_TRACE(std::string(wire_name(wire)) + ", " + std::to_string(n_ranks) +
                             " ranks, n=" + std::to_string(n));
                const Buffers inputs = random_inputs(n_ranks, n, 7 + n_ranks);
                const Buffers results = allreduce_all(*engine, inputs);
                const std::vector<float> expected = ordered_sum(inputs, wire);
                EXPECT_EQ(std::memcmp(results[0].data(), expected.data(), expected.size() * sizeof(float)), 0);
            }
        }
    }
}

TEST(AllReduceWire, Bf16RoundingMatchesGgml) {
    std::mt19937 rng(3);
    std::vector<uint32_t> patterns = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                      0x7f800001u, 0xffff0001u, 0x7f7fffffu, 0x3f808000u, 0x3f818000u,
                                      0x3f80ffffu, 0x00000001u, 0x807fffffu};
    for (int i = 0; i < 1000000; ++i) patterns.push_back(rng());
    size_t differing = 0;
    for (const uint32_t bits : patterns) {
        float x;
        std::memcpy(&x, &bits, sizeof x);
        const float ours = round_to_bf16(x);
        uint32_t ours_bits;
        std::memcpy(&ours_bits, &ours, sizeof ours_bits);
        differing += ours_bits != (uint32_t) ggml_fp32_to_bf16(x).bits << 16;
    }
    EXPECT_EQ(differing, 0u);
}

// --- many calls -----------------------------------------------------------------

class AllReduceEngineTest : public testing::TestWithParam<std::string> {};

TEST_P(AllReduceEngineTest, ThousandSmallCalls) {
    const int n_ranks = 3;
    const size_t n = 5;
    auto engine = engine_for(GetParam(), n_ranks);
    std::atomic<int> wrong{0};
    run_ranks(all_ranks(n_ranks), [&](int rank) {
        std::vector<float> data(n);
        for (int call = 0; call < 1000; ++call) {
            for (size_t j = 0; j < n; ++j) data[j] = (float) (rank + call + j);
            engine->allreduce(rank, data.data(), n);
            for (size_t j = 0; j < n; ++j) {
                wrong += data[j] != (float) (n_ranks * (call + j) + n_ranks * (n_ranks - 1) / 2);
            }
        }
    });
    EXPECT_FALSE(engine->failed()) << engine->error();
    EXPECT_EQ(wrong.load(), 0);
}

// Calls of different sizes in a row (a fast rank already publishing the next
// call while others finish this one) must not disturb each other.
TEST_P(AllReduceEngineTest, AlternatingSmallAndLargeCalls) {
    const int n_ranks = 4;
    auto engine = engine_for(GetParam(), n_ranks);
    std::atomic<int> wrong{0};
    run_ranks(all_ranks(n_ranks), [&](int rank) {
        for (int call = 0; call < 200; ++call) {
            std::vector<float> data(call % 3 == 2 ? 20000 : 1 + call % 50);
            for (size_t j = 0; j < data.size(); ++j) data[j] = (float) (rank * call + j % 7);
            engine->allreduce(rank, data.data(), data.size());
            for (size_t j = 0; j < data.size(); ++j) {
                wrong += data[j] != (float) (call * n_ranks * (n_ranks - 1) / 2 + n_ranks * (j % 7));
            }
        }
    });
    EXPECT_FALSE(engine->failed()) << engine->error();
    EXPECT_EQ(wrong.load(), 0);
}

TEST_P(AllReduceEngineTest, ZeroElementsIsANoOp) {
    auto engine = engine_for(GetParam(), 3);
    std::vector<float> values = {1.0f, 2.0f, 3.0f};
    run_ranks(all_ranks(3), [&](int rank) { engine->allreduce(rank, &values[rank], 0); });
    EXPECT_FALSE(engine->failed()) << engine->error();
    EXPECT_EQ(values, (std::vector<float>{1.0f, 2.0f, 3.0f}));
}

// --- failures -------------------------------------------------------------------

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs the ranks in `present` once (the others never arrive) and returns how long the slowest took.
double run_without_missing(AllReduceEngine & engine, const std::vector<int> & present, size_t n = 64) {
    const Clock::time_point start = Clock::now();
    run_ranks(present, [&](int rank) {
        std::vector<float> data(n, 1.0f);
        engine.allreduce(rank, data.data(), n);
    });
    return seconds_since(start);
}

TEST_P(AllReduceEngineTest, MissingRankTimesOutAndIsNamed) {
    auto engine = engine_for(GetParam(), 3, WireType::F32, 0.2);
    const double took = run_without_missing(*engine, {0, 2});
    EXPECT_GE(took, 0.19);
    EXPECT_LT(took, 2.0);
    ASSERT_TRUE(engine->failed());
    EXPECT_EQ(engine->error(), "allreduce: rank 1 did not arrive within 0.2 s (group of 3)");

    // A failed group stays failed: later calls return at once.
    EXPECT_LT(run_without_missing(*engine, {0, 1, 2}), 0.15);
    EXPECT_TRUE(engine->failed());
}

TEST_P(AllReduceEngineTest, MissingRankNamedInGroupsOfTwoAndFour) {
    auto pair = engine_for(GetParam(), 2, WireType::F32, 0.2);
    run_without_missing(*pair, {0});
    EXPECT_EQ(pair->error(), "allreduce: rank 1 did not arrive within 0.2 s (group of 2)");

    auto four = engine_for(GetParam(), 4, WireType::F32, 0.2);
    run_without_missing(*four, {0, 1, 2});
    EXPECT_EQ(four->error(), "allreduce: rank 3 did not arrive within 0.2 s (group of 4)");

    auto two_missing = engine_for(GetParam(), 4, WireType::F32, 0.2);
    run_without_missing(*two_missing, {0, 2});
    EXPECT_EQ(two_missing->error(), "allreduce: ranks 1, 3 did not arrive within 0.2 s (group of 4)");
}

TEST_P(AllReduceEngineTest, MissingRankAfterSuccessfulCalls) {
    auto engine = engine_for(GetParam(), 3, WireType::F32, 0.2);
    run_without_missing(*engine, {0, 1, 2});
    run_without_missing(*engine, {0, 1, 2});
    ASSERT_FALSE(engine->failed());
    run_without_missing(*engine, {1, 2});
    EXPECT_EQ(engine->error(), "allreduce: rank 0 did not arrive within 0.2 s (group of 3)");
}

TEST_P(AllReduceEngineTest, AbortReleasesWaiters) {
    auto engine = engine_for(GetParam(), 3, WireType::F32, 30.0);
    std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        engine->abort("rank 2: weights failed to load");
    });
    const double took = run_without_missing(*engine, {0, 1});
    aborter.join();
    EXPECT_LT(took, 2.0);
    ASSERT_TRUE(engine->failed());
    EXPECT_EQ(engine->error(), "rank 2: weights failed to load");
}

TEST_P(AllReduceEngineTest, AbortBeforeCallsMakesThemReturnAtOnce) {
    auto engine = engine_for(GetParam(), 2, WireType::F32, 30.0);
    engine->abort("stopped");
    engine->abort("second reason is not kept");
    EXPECT_LT(run_without_missing(*engine, {0, 1}), 1.0);
    EXPECT_EQ(engine->error(), "stopped");
}

TEST_P(AllReduceEngineTest, DifferentCountsFailTheGroup) {
    auto engine = engine_for(GetParam(), 2, WireType::F32, 1.0);
    run_ranks({0, 1}, [&](int rank) {
        std::vector<float> data(rank == 0 ? 10 : 11, 1.0f);
        engine->allreduce(rank, data.data(), data.size());
    });
    ASSERT_TRUE(engine->failed());
    EXPECT_EQ(engine->error(), "allreduce: ranks called with different element counts (rank 0: 10, rank 1: 11)");
}

// Doubles: every value is a float widened, so every partial sum is exact in
// double and the result must equal the reference exactly, on a BF16 wire too,
// for power-of-two and other rank counts.
TEST_P(AllReduceEngineTest, DoublesSumExactlyWhateverTheWire) {
    for (const int n_ranks : {2, 3, 4, 5}) {
        SCOPED_TRACE("ranks=" + std::to_string(n_ranks));
        auto engine = engine_for(GetParam(), n_ranks, WireType::BF16);
        const Buffers inputs = random_inputs(n_ranks, 10007, (unsigned) n_ranks);
        std::vector<std::vector<double>> data(n_ranks);
        for (int r = 0; r < n_ranks; ++r) data[r].assign(inputs[r].begin(), inputs[r].end());
        run_ranks(all_ranks(n_ranks), [&](int rank) { engine->allreduce(rank, data[rank].data(), data[rank].size()); });
        ASSERT_FALSE(engine->failed()) << engine->error();
        size_t wrong = 0;
        for (size_t i = 0; i < data[0].size(); ++i) {
            double expected = 0.0;
            for (int r = n_ranks - 1; r >= 0; --r) expected += (double) inputs[r][i];  // another order: still exact
            for (int r = 0; r < n_ranks; ++r) wrong += data[r][i] != expected;
        }
        EXPECT_EQ(wrong, 0u);
    }
}

TEST_P(AllReduceEngineTest, DifferentElementTypesFailTheGroup) {
    auto engine = engine_for(GetParam(), 2, WireType::F32, 1.0);
    run_ranks({0, 1}, [&](int rank) {
        if (rank == 0) {
            std::vector<float> data(10, 1.0f);
            engine->allreduce(rank, data.data(), data.size());
        } else {
            std::vector<double> data(10, 1.0);
            engine->allreduce(rank, data.data(), data.size());
        }
    });
    ASSERT_TRUE(engine->failed());
    EXPECT_EQ(engine->error(), "allreduce: ranks called with different element types (rank 0: f32, rank 1: f64)");
}

TEST_P(AllReduceEngineTest, RankOutOfRangeFailsTheGroup) {
    auto engine = engine_for(GetParam(), 2);
    float x = 1.0f;
    engine->allreduce(2, &x, 1);
    ASSERT_TRUE(engine->failed());
    EXPECT_EQ(engine->error(), "allreduce: rank 2 is out of range for a group of 2");
}

INSTANTIATE_TEST_SUITE_P(Engines, AllReduceEngineTest, testing::Values("cpu", "butterfly"),
                         [](const testing::TestParamInfo<std::string> & info) { return info.param; });

// --- choosing an engine --------------------------------------------------------------

TEST(AllReduceFactory, UnknownNameThrowsListingValidNames) {
    try {
        engine_for("ring", 2);
        FAIL() << "no exception";
    } catch (const Error & e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("unknown allreduce engine 'ring'"), std::string::npos) << what;
        EXPECT_NE(what.find("auto, cpu, butterfly, none"), std::string::npos) << what;
    }
}

TEST(AllReduceFactory, AutoPicksNoneForOneRankAndCpuForMore) {
    testing::internal::CaptureStderr();
    auto single = engine_for("auto", 1);
    EXPECT_EQ(testing::internal::GetCapturedStderr(),
              "llama-tp: allreduce engine none (auto: 1 rank, nothing to reduce)\n");
    EXPECT_STREQ(single->name(), "none");
    float x = 2.5f;
    single->allreduce(0, &x, 1);
    EXPECT_EQ(x, 2.5f);
    EXPECT_FALSE(single->failed());

    testing::internal::CaptureStderr();
    auto pair = engine_for("", 2);
    EXPECT_EQ(testing::internal::GetCapturedStderr(),
              "llama-tp: allreduce engine cpu (auto: 2 ranks in one process, host memory)\n");
    EXPECT_STREQ(pair->name(), "cpu");
    EXPECT_EQ(pair->n_ranks(), 2);
}

// A group of processes that only says how many there are and which engine
// it was asked for.
class ProcessesStandIn final : public ProcessGroup {
  public:
    explicit ProcessesStandIn(int size) : size_(size) {}
    int rank() const override { return 0; }
    int size() const override { return size_; }
    int local_size() const override { return size_; }
    int local_rank() const override { return 0; }
    const std::string & host() const override { return host_; }
    void broadcast(std::vector<uint8_t> &, Patience) override {}
    void gather(const std::vector<uint8_t> &, std::vector<std::vector<uint8_t>> *, Patience) override {}
    void end_together() override {}
    std::unique_ptr<AllReduceEngine> make_allreduce(const AllReduceConfig & config) override {
        asked.push_back(config.engine);
        AllReduceConfig local = config;
        local.engine = "cpu";
        local.processes = nullptr;
        return make_allreduce_engine(local);
    }
    std::vector<std::string> asked;

  private:
    int size_;
    std::string host_ = "here";
};

TEST(AllReduceFactory, RanksInSeveralProcessesTakeTheirGroupsEngine) {
    ProcessesStandIn two(2);
    AllReduceConfig c;
    c.n_ranks = 2;
    c.processes = &two;
    for (const char * name : {"auto", "mpi", "NCCL"}) {
        c.engine = name;
        testing::internal::CaptureStderr();
        EXPECT_STREQ(make_allreduce_engine(c)->name(), "cpu") << name;
        testing::internal::GetCapturedStderr();
    }
    EXPECT_EQ(two.asked, (std::vector<std::string>{"auto", "mpi", "NCCL"}));
    c.engine = "butterfly";
    try {
        make_allreduce_engine(c);
        ADD_FAILURE() << "butterfly taken across processes";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("'butterfly' joins the ranks of one process; ranks in 2 processes need "
                                             "mpi, nccl (or auto)"),
                  std::string::npos)
            << e.what();
    }
    c.processes = nullptr;
    testing::internal::CaptureStderr();
    EXPECT_STREQ(make_allreduce_engine(c)->name(), "butterfly") << "no processes: this process's ranks' engines";
    testing::internal::GetCapturedStderr();
}

TEST(AllReduceFactory, NamesAreCaseAndSpaceInsensitive) {
    EXPECT_STREQ(engine_for(" Butterfly ", 3)->name(), "butterfly");
    EXPECT_STREQ(engine_for("CPU", 3)->name(), "cpu");
}

TEST(AllReduceFactory, CudaOnlyNamesFallBackWithOneWarning) {
    for (const char * name : {"nccl", "internal"}) {
        testing::internal::CaptureStderr();
        auto engine = engine_for(name, 2);
        const std::string log = testing::internal::GetCapturedStderr();
        EXPECT_STREQ(engine->name(), "cpu");
        EXPECT_EQ(log.rfind("llama-tp: warning: allreduce engine " + std::string(name) + " unavailable (", 0), 0u)
            << log;
#ifdef LLAMA_TP_HAVE_CUDA
        EXPECT_NE(log.find("the ranks' values are in host memory"), std::string::npos) << log;
#else
        EXPECT_NE(log.find("needs a CUDA build"), std::string::npos) << log;
#endif
        EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
    }
}

// The chain with stand-ins for the GPU engines, as a CUDA build has them.
class StandInEngine final : public AllReduceEngine {
  public:
    StandInEngine(const char * name, int n_ranks, bool device, std::string joins)
        : name_(name), n_ranks_(n_ranks), device_(device), joins_(std::move(joins)) {}
    const char * name() const override { return name_; }
    int n_ranks() const override { return n_ranks_; }
    std::string joins() const override { return joins_; }
    bool takes_device_memory() const override { return device_; }
    bool rounds_to_bf16() const override { return false; }
    void allreduce(int, float *, size_t) override {}
    void allreduce(int, double *, size_t) override {}
    bool failed() const override { return false; }
    std::string error() const override { return ""; }
    void abort(const std::string &) override {}

  private:
    const char * name_;
    int n_ranks_;
    bool device_;
    std::string joins_;
};

// This build's engines plus stand-ins: nccl fails to initialise when told to,
// internal takes exactly two CUDA ranks.
AllReduceBuilders with_gpu_stand_ins(bool nccl_fails) {
    AllReduceBuilders b = built_allreduce_engines();
    b["nccl"] = [nccl_fails](const AllReduceConfig & c) -> std::unique_ptr<AllReduceEngine> {
        if (c.memory != RankMemory::Cuda) throw Error("the ranks' values are in host memory");
        if (nccl_fails) throw Error("ncclCommInitAll: unhandled system error");
        return std::make_unique<StandInEngine>("nccl", c.n_ranks, true,
                                               ranks_text(c.n_ranks) + " on CUDA devices, NCCL");
    };
    b["internal"] = [](const AllReduceConfig & c) -> std::unique_ptr<AllReduceEngine> {
        if (c.memory != RankMemory::Cuda) throw Error("the ranks' values are in host memory");
        if (c.n_ranks != 2) throw Error("needs exactly 2 ranks, not " + std::to_string(c.n_ranks));
        return std::make_unique<StandInEngine>("internal", c.n_ranks, true,
                                               "2 CUDA devices, through pinned host memory");
    };
    return b;
}

AllReduceConfig cuda_ranks(int n, const std::string & engine = "auto") {
    AllReduceConfig c;
    c.engine = engine;
    c.n_ranks = n;
    c.memory = RankMemory::Cuda;
    for (int r = 0; r < n; ++r) c.cuda_devices.push_back(r);
    return c;
}

TEST(AllReduceChain, AutoOnCudaRanksPicksNccl) {
    const AllReduceChoice c = choose_allreduce_engine(cuda_ranks(4), with_gpu_stand_ins(false));
    EXPECT_STREQ(c.engine->name(), "nccl");
    EXPECT_EQ(c.log_line, "llama-tp: allreduce engine nccl (auto: 4 ranks on CUDA devices, NCCL)");
}

TEST(AllReduceChain, NcclThatFailsFallsBackToInternalForTwoRanks) {
    const AllReduceChoice c = choose_allreduce_engine(cuda_ranks(2), with_gpu_stand_ins(true));
    EXPECT_STREQ(c.engine->name(), "internal");
    EXPECT_EQ(c.log_line,
              "llama-tp: warning: allreduce engine nccl unavailable (nccl: ncclCommInitAll: unhandled system error); "
              "using internal (2 CUDA devices, through pinned host memory)");
}

TEST(AllReduceChain, BeyondTwoRanksTheHostEngineTakesCopies) {
    const AllReduceChoice c = choose_allreduce_engine(cuda_ranks(3), with_gpu_stand_ins(true));
    EXPECT_STREQ(c.engine->name(), "cpu");
    EXPECT_FALSE(c.engine->takes_device_memory());
    EXPECT_NE(c.log_line.find("internal: needs exactly 2 ranks, not 3"), std::string::npos) << c.log_line;
    EXPECT_NE(c.log_line.find("using cpu (3 ranks in one process, host memory (copied from the devices))"),
              std::string::npos)
        << c.log_line;
}

TEST(AllReduceChain, InternalAskedForOnHostRanksFallsBackToCpu) {
    AllReduceConfig c = cuda_ranks(2, "internal");
    c.memory = RankMemory::Host;
    c.cuda_devices.clear();
    const AllReduceChoice choice = choose_allreduce_engine(c, with_gpu_stand_ins(false));
    EXPECT_STREQ(choice.engine->name(), "cpu");
    EXPECT_NE(choice.log_line.find("internal: the ranks' values are in host memory"), std::string::npos);
}

TEST(AllReduceChain, HostRanksNeverTryTheGpuEngines) {
    AllReduceConfig c;
    c.n_ranks = 2;
    const AllReduceChoice choice = choose_allreduce_engine(c, with_gpu_stand_ins(false));
    EXPECT_STREQ(choice.engine->name(), "cpu");
    EXPECT_EQ(choice.log_line, "llama-tp: allreduce engine cpu (auto: 2 ranks in one process, host memory)");
}

TEST(AllReduceChain, ThisBuildWithoutCudaServesCudaRanksThroughHostMemory) {
    const AllReduceChoice c = choose_allreduce_engine(cuda_ranks(2), built_allreduce_engines());
#ifndef LLAMA_TP_HAVE_CUDA
    EXPECT_STREQ(c.engine->name(), "cpu");
    EXPECT_NE(c.log_line.find("nccl: needs a CUDA build; internal: needs a CUDA build"), std::string::npos)
        << c.log_line;
#else
    EXPECT_TRUE(c.engine);
#endif
}

TEST(AllReduceFactory, TooManyRanksForCpuFallBackToButterfly) {
    testing::internal::CaptureStderr();
    auto engine = engine_for("cpu", 40);
    testing::internal::GetCapturedStderr();
    EXPECT_STREQ(engine->name(), "butterfly");
}

TEST(AllReduceFactory, BadConfigsThrow) {
    EXPECT_THROW(engine_for("none", 2), Error);
    EXPECT_THROW(engine_for("auto", 0), Error);
    EXPECT_THROW(engine_for("auto", 2, WireType::F32, 0.0), Error);
}

// Sets an environment variable for one scope and restores it afterwards.
class ScopedEnv {
  public:
    ScopedEnv(const char * name, const char * value) : name_(name) {
        if (const char * old = std::getenv(name)) old_ = old, had_ = true;
        if (value)
            setenv(name, value, 1);
        else
            unsetenv(name);
    }
    ~ScopedEnv() {
        if (had_)
            setenv(name_, old_.c_str(), 1);
        else
            unsetenv(name_);
    }

  private:
    const char * name_;
    std::string old_;
    bool had_ = false;
};

TEST(AllReduceFactory, EnvironmentPrefersOwnVariableOverUpstreams) {
    {
        ScopedEnv own("LLAMA_TP_ALLREDUCE", "butterfly");
        ScopedEnv upstream("GGML_CUDA_ALLREDUCE", "nccl");
        EXPECT_EQ(allreduce_engine_from(Environment::of_process()), "butterfly");
    }
    {
        ScopedEnv own("LLAMA_TP_ALLREDUCE", nullptr);
        ScopedEnv upstream("GGML_CUDA_ALLREDUCE", "nccl");
        EXPECT_EQ(allreduce_engine_from(Environment::of_process()), "nccl");
    }
    {
        ScopedEnv own("LLAMA_TP_ALLREDUCE", nullptr);
        ScopedEnv upstream("GGML_CUDA_ALLREDUCE", nullptr);
        EXPECT_EQ(allreduce_engine_from(Environment::of_process()), "");
    }
    {
        // Upstream's "none" is its generic fallback, not "one rank".
        ScopedEnv own("LLAMA_TP_ALLREDUCE", nullptr);
        ScopedEnv upstream("GGML_CUDA_ALLREDUCE", "none");
        EXPECT_EQ(allreduce_engine_from(Environment::of_process()), "butterfly");
    }
}

// Every variable of the GPU engines' sizes, unset for one scope.
struct NoSizeVariables {
    ScopedEnv a{"LLAMA_TP_NCCL_BF16_MIN_BYTES", nullptr}, b{"LLAMA_TP_INTERNAL_BF16_MIN_BYTES", nullptr},
        c{"GGML_CUDA_AR_BF16_THRESHOLD", nullptr}, d{"LLAMA_TP_INTERNAL_COPY_MIN_BYTES", nullptr},
        e{"GGML_CUDA_AR_COPY_THRESHOLD", nullptr}, f{"LLAMA_TP_INTERNAL_COPY_CHUNK_BYTES", nullptr},
        g{"GGML_CUDA_AR_COPY_CHUNK_BYTES", nullptr};
};

TEST(GpuAllReduceSizes, DefaultsWithoutTheEnvironment) {
    NoSizeVariables none;
    const GpuAllReduceSizes s = GpuAllReduceSizes::from_env();
    EXPECT_EQ(s.nccl_bf16_min_bytes, size_t(65536));
    EXPECT_EQ(s.internal_bf16_min_bytes, size_t(1));
    EXPECT_EQ(s.internal_copy_min_bytes, size_t(1) << 20);
    EXPECT_EQ(s.internal_copy_chunk_bytes, size_t(0));
    // By size: a quarter of the call, within [512 KiB, 2 MiB].
    EXPECT_EQ(s.copy_chunk_bytes(size_t(1) << 20), size_t(512) << 10);
    EXPECT_EQ(s.copy_chunk_bytes(size_t(4) << 20), size_t(1) << 20);
    EXPECT_EQ(s.copy_chunk_bytes(size_t(64) << 20), size_t(2) << 20);
}

TEST(GpuAllReduceSizes, OwnVariablesBeforeUpstreams) {
    NoSizeVariables none;
    ScopedEnv upstream_copy("GGML_CUDA_AR_COPY_THRESHOLD", "4194304");
    ScopedEnv upstream_chunk("GGML_CUDA_AR_COPY_CHUNK_BYTES", "1M");
    ScopedEnv upstream_bf16("GGML_CUDA_AR_BF16_THRESHOLD", "0");
    GpuAllReduceSizes s = GpuAllReduceSizes::from_env();
    EXPECT_EQ(s.internal_copy_min_bytes, size_t(4) << 20);
    EXPECT_EQ(s.internal_copy_chunk_bytes, size_t(1) << 20);
    EXPECT_EQ(s.copy_chunk_bytes(size_t(64) << 20), size_t(1) << 20) << "a fixed chunk whatever the size";
    EXPECT_EQ(s.internal_bf16_min_bytes, size_t(0));

    ScopedEnv own_copy("LLAMA_TP_INTERNAL_COPY_MIN_BYTES", "0");
    ScopedEnv own_chunk("LLAMA_TP_INTERNAL_COPY_CHUNK_BYTES", "256k");
    ScopedEnv own_bf16("LLAMA_TP_INTERNAL_BF16_MIN_BYTES", "2G");
    ScopedEnv nccl("LLAMA_TP_NCCL_BF16_MIN_BYTES", "128K");
    s = GpuAllReduceSizes::from_env();
    EXPECT_EQ(s.internal_copy_min_bytes, size_t(0));
    EXPECT_EQ(s.internal_copy_chunk_bytes, size_t(256) << 10);
    EXPECT_EQ(s.internal_bf16_min_bytes, size_t(2) << 30);
    EXPECT_EQ(s.nccl_bf16_min_bytes, size_t(128) << 10);
}

TEST(GpuAllReduceSizes, MalformedValuesNameTheirVariable) {
    NoSizeVariables none;
    for (const char * bad : {"", "x", "12KB", "-1", "1.5M", " 7", "99999999999999999999"}) {
        ScopedEnv v("GGML_CUDA_AR_COPY_THRESHOLD", bad);
        if (!*bad) {
            EXPECT_EQ(GpuAllReduceSizes::from_env().internal_copy_min_bytes, size_t(1) << 20) << "empty is unset";
            continue;
        }
        try {
            GpuAllReduceSizes::from_env();
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const Error & e) {
            EXPECT_NE(std::string(e.what()).find("GGML_CUDA_AR_COPY_THRESHOLD must be a byte count"), std::string::npos)
                << e.what();
            EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
        }
    }
    ScopedEnv tiny("LLAMA_TP_INTERNAL_COPY_CHUNK_BYTES", "4096");
    try {
        GpuAllReduceSizes::from_env();
        ADD_FAILURE() << "accepted a 4 KiB chunk";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("at least 64K, not 4096 bytes"), std::string::npos) << e.what();
    }
}

TEST(AllReduceWire, TheCallersWireElseTheEnginesBySize) {
    EXPECT_EQ(wire_of_call(WireType::F32, 1, 1 << 20), WireType::F32);
    EXPECT_EQ(wire_of_call(WireType::BF16, 1 << 20, 4), WireType::BF16) << "asked for: every call";
    EXPECT_EQ(wire_of_call(std::nullopt, 65536, 65532), WireType::F32);
    EXPECT_EQ(wire_of_call(std::nullopt, 65536, 65536), WireType::BF16);
    EXPECT_EQ(wire_of_call(std::nullopt, 0, size_t(1) << 30), WireType::F32) << "0: never";
    EXPECT_TRUE(rounds_any_call(std::nullopt, 1));
    EXPECT_FALSE(rounds_any_call(std::nullopt, 0));
    EXPECT_FALSE(rounds_any_call(WireType::F32, 1));
    EXPECT_TRUE(rounds_any_call(WireType::BF16, 0));
}

// Host memory is the fastest link there is: the host engines round only when asked.
TEST(AllReduceWire, HostEnginesKeepF32UnlessAsked) {
    for (const char * name : {"cpu", "butterfly"}) {
        AllReduceConfig c;
        c.engine = name;
        c.n_ranks = 2;
        EXPECT_FALSE(make_allreduce_engine(c)->rounds_to_bf16()) << name;
        c.wire = WireType::BF16;
        EXPECT_TRUE(make_allreduce_engine(c)->rounds_to_bf16()) << name;
    }
}

}  // namespace
}  // namespace llama_tp
