// The GPU engines on real devices (CUDA builds, run where a GPU is): two
// ranks on two GPUs, or twice on one GPU where there is only one. Sums
// against the cpu engine's bits, chunked calls, doubles, the engines' own
// wire and the internal engine's copy-engine path, a missing rank and
// abort; and the exact sums' kernels against the host's bits. Exits 77
// (skipped) without a GPU.

#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/comm/allreduce_wire.h"
#include "ggml-ext/gpu/cuda_runtime.h"
#include "ggml-ext/ops/exact_sum.h"
#include "ggml-ext/ops/exact_sum_kernels.h"

#include "ggml-ext/gpu/gpu_runtime_api.h"
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace llama_tp {
namespace {

std::vector<int> two_devices() {
    int count = 0;
    (void) cudaGetDeviceCount(&count);
    return count >= 2 ? std::vector<int>{0, 1} : std::vector<int>{0, 0};
}

AllReduceConfig config_for(const std::string & engine, std::optional<WireType> wire = WireType::F32,
                           double timeout_s = 30.0) {
    AllReduceConfig c;
    c.engine = engine;
    c.n_ranks = 2;
    c.wire = wire;
    c.timeout_s = timeout_s;
    c.memory = RankMemory::Cuda;
    c.cuda_devices = two_devices();
    return c;
}

// One rank's values in its device's memory.
template <typename T>
class DeviceValues {
  public:
    DeviceValues(int device, const std::vector<T> & values) : device_(device), n_(values.size()) {
        CurrentDevice current(device);
        check_cuda(cudaMalloc(reinterpret_cast<void **>(&data_), n_ * sizeof(T)), "cudaMalloc", device);
        check_cuda(cudaMemcpy(data_, values.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy", device);
    }
    ~DeviceValues() { (void) cudaFree(data_); }
    T * data() { return data_; }
    std::vector<T> read() const {
        std::vector<T> out(n_);
        CurrentDevice current(device_);
        check_cuda(cudaMemcpy(out.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy", device_);
        return out;
    }

  private:
    int device_;
    size_t n_;
    T * data_ = nullptr;
};

template <typename T>
std::vector<T> random_values(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> value(-4.0, 4.0);
    std::vector<T> v(n);
    for (T & x : v) x = (T) value(rng);
    return v;
}

// Both ranks' results after `calls` sums in a row, and the cpu engine's on
// the same values. on_stream: each queued on the rank's stream
// (allreduce_on_stream) with no wait between them, then one wait.
template <typename T>
void check_engine(const std::string & name, size_t n, std::optional<WireType> asked, bool on_stream = false,
                  int calls = 1, const GpuAllReduceSizes & sizes = GpuAllReduceSizes{}) {
    AllReduceConfig c = config_for(name, asked, on_stream ? 5.0 : 30.0);
    c.gpu_sizes = sizes;
    const size_t bf16_min = name == "internal" ? sizes.internal_bf16_min_bytes : sizes.nccl_bf16_min_bytes;
    const WireType wire = sizeof(T) == 8 ? WireType::F32 : wire_of_call(asked, bf16_min, n * sizeof(float));
    std::unique_ptr<AllReduceEngine> engine = make_allreduce_engine(c);
    ASSERT_STREQ(engine->name(), name.c_str());
    ASSERT_TRUE(engine->takes_device_memory());
    ASSERT_TRUE(!on_stream || engine->runs_on_stream());
    const std::vector<T> a = random_values<T>(n, 1), b = random_values<T>(n, 2);
    DeviceValues<T> da(c.cuda_devices[0], a), db(c.cuda_devices[1], b);
    auto rank = [&](int r, DeviceValues<T> & d) {
        if (!on_stream) {
            for (int i = 0; i < calls; ++i) engine->allreduce(r, d.data(), n);
            return;
        }
        CudaStream stream(c.cuda_devices[r]);
        for (int i = 0; i < calls; ++i) engine->allreduce_on_stream(r, d.data(), n, stream.get());
        CurrentDevice current(c.cuda_devices[r]);
        check_cuda(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize", c.cuda_devices[r]);
    };
    std::thread t0([&] { rank(0, da); });
    std::thread t1([&] { rank(1, db); });
    t0.join();
    t1.join();
    ASSERT_FALSE(engine->failed()) << engine->error();
    const std::vector<T> ra = da.read(), rb = db.read();
    ASSERT_EQ(std::memcmp(ra.data(), rb.data(), n * sizeof(T)), 0) << "both ranks hold the same bits";

    AllReduceConfig host;
    host.engine = "cpu";
    host.n_ranks = 2;
    host.wire = wire;
    std::unique_ptr<AllReduceEngine> cpu = make_allreduce_engine(host);
    std::vector<T> ha = a, hb = b;
    std::thread h0([&] {
        for (int i = 0; i < calls; ++i) cpu->allreduce(0, ha.data(), n);
    });
    std::thread h1([&] {
        for (int i = 0; i < calls; ++i) cpu->allreduce(1, hb.data(), n);
    });
    h0.join();
    h1.join();
    if (name == "internal" || wire == WireType::F32 || sizeof(T) == 8) {
        EXPECT_EQ(std::memcmp(ra.data(), ha.data(), n * sizeof(T)), 0) << "the cpu engine's bits";
    } else {
        // NCCL sums BF16 values in BF16: one more rounding than the host engines.
        for (size_t i = 0; i < n; ++i) ASSERT_NEAR(ra[i], ha[i], 0.02 * calls * (std::fabs(ha[i]) + 1.0)) << i;
    }
}

// nccl needs a GPU per rank; the internal engine takes one GPU twice.
std::vector<std::string> engines() {
    std::vector<std::string> out{"internal"};
#ifdef LLAMA_TP_HAVE_NCCL
    if (two_devices()[0] != two_devices()[1]) out.push_back("nccl");
#endif
    return out;
}

TEST(CudaAllReduce, SumsMatchTheCpuEngine) {
    for (const std::string & name : engines()) {
        // One element, one block, and more than one 8 MiB chunk of the
        // internal engine on every wire (5M values: 10 MiB in BF16), by
        // default the largest through its copy engines, and without them.
        GpuAllReduceSizes kernels_only;
        kernels_only.internal_copy_min_bytes = 0;
        for (size_t n : {size_t(1), size_t(4099), size_t(5) << 20}) {
            for (const GpuAllReduceSizes & sizes : {GpuAllReduceSizes{}, kernels_only}) {
                SCOPED_TRACE(name + " n=" + std::to_string(n) + (sizes.internal_copy_min_bytes ? "" : ", kernels"));
                check_engine<float>(name, n, WireType::F32, false, 1, sizes);
                check_engine<float>(name, n, WireType::BF16, false, 1, sizes);
                check_engine<float>(name, n, std::nullopt, false, 1, sizes);
                check_engine<double>(name, n, WireType::F32, false, 1, sizes);
            }
        }
    }
}

// Every call through the copy engines, in chunks of 64 KiB and pieces of
// 8 MiB; no kernel waits for the other rank there, so one GPU serves both
// ranks on their streams too.
TEST(CudaAllReduce, TheCopyEnginesGiveTheCpuEnginesBits) {
    GpuAllReduceSizes sizes;
    sizes.internal_copy_min_bytes = 1;
    sizes.internal_copy_chunk_bytes = GpuAllReduceSizes::kMinCopyChunkBytes;
    for (bool on_stream : {false, true}) {
        for (size_t n : {size_t(1), size_t(4099), size_t(100003), size_t(5) << 20}) {
            SCOPED_TRACE(std::string(on_stream ? "on a stream" : "host waits") + " n=" + std::to_string(n));
            check_engine<float>("internal", n, WireType::F32, on_stream, 3, sizes);
            check_engine<float>("internal", n, WireType::BF16, on_stream, 3, sizes);
            check_engine<double>("internal", n, WireType::F32, on_stream, 3, sizes);
        }
    }
}

// Small calls through the kernels, large ones through the copy engines,
// alternating: each path keeps its own count of chunks and pieces.
TEST(CudaAllReduce, SmallAndLargeCallsInTurn) {
    AllReduceConfig c = config_for("internal", std::nullopt);
    c.gpu_sizes.internal_copy_min_bytes = 64 << 10;
    std::unique_ptr<AllReduceEngine> engine = make_allreduce_engine(c);
    EXPECT_TRUE(engine->rounds_to_bf16()) << "BF16 by default";
    const std::vector<size_t> counts{1000, 300000, 7, 40000, 1 << 20};
    std::vector<std::vector<float>> a, b;
    std::vector<std::unique_ptr<DeviceValues<float>>> da, db;
    for (size_t i = 0; i < counts.size(); ++i) {
        a.push_back(random_values<float>(counts[i], 20 + (unsigned) i));
        b.push_back(random_values<float>(counts[i], 40 + (unsigned) i));
        da.push_back(std::make_unique<DeviceValues<float>>(c.cuda_devices[0], a[i]));
        db.push_back(std::make_unique<DeviceValues<float>>(c.cuda_devices[1], b[i]));
    }
    auto rank = [&](int r, std::vector<std::unique_ptr<DeviceValues<float>>> & d) {
        for (size_t i = 0; i < counts.size(); ++i) engine->allreduce(r, d[i]->data(), counts[i]);
    };
    std::thread t0([&] { rank(0, da); });
    std::thread t1([&] { rank(1, db); });
    t0.join();
    t1.join();
    ASSERT_FALSE(engine->failed()) << engine->error();
    AllReduceConfig host;
    host.engine = "cpu";
    host.n_ranks = 2;
    host.wire = WireType::BF16;
    std::unique_ptr<AllReduceEngine> cpu = make_allreduce_engine(host);
    for (size_t i = 0; i < counts.size(); ++i) {
        std::vector<float> x = a[i], y = b[i];
        std::thread h0([&] { cpu->allreduce(0, x.data(), counts[i]); });
        std::thread h1([&] { cpu->allreduce(1, y.data(), counts[i]); });
        h0.join();
        h1.join();
        const std::vector<float> ra = da[i]->read(), rb = db[i]->read();
        EXPECT_EQ(std::memcmp(ra.data(), x.data(), counts[i] * sizeof(float)), 0) << "call " << i;
        EXPECT_EQ(std::memcmp(rb.data(), x.data(), counts[i] * sizeof(float)), 0) << "call " << i;
    }
}

TEST(CudaAllReduce, TheCopyEnginesNoticeAMissingRank) {
    AllReduceConfig c = config_for("internal", WireType::F32, 0.5);
    c.gpu_sizes.internal_copy_min_bytes = 1;
    std::unique_ptr<AllReduceEngine> engine = make_allreduce_engine(c);
    DeviceValues<float> d(c.cuda_devices[0], random_values<float>(1 << 20, 3));
    engine->allreduce(0, d.data(), 1 << 20);
    EXPECT_TRUE(engine->failed());
    EXPECT_NE(engine->error().find("did not arrive"), std::string::npos) << engine->error();
}

// Two ranks' kernels that wait for each other need two GPUs: on one GPU
// they advanced about once a millisecond, and timed out now and then.
TEST(CudaAllReduce, OnStreamSumsMatchTheCpuEngine) {
    if (two_devices()[0] == two_devices()[1]) GTEST_SKIP() << "needs two GPUs";
    for (const std::string & name : engines()) {
        for (size_t n : {size_t(1), size_t(4099), size_t(5) << 20}) {
            SCOPED_TRACE(name + " n=" + std::to_string(n));
            check_engine<float>(name, n, WireType::F32, true, 3);
            check_engine<float>(name, n, WireType::BF16, true, 3);
            check_engine<double>(name, n, WireType::F32, true, 3);
        }
    }
}

TEST(CudaAllReduce, OnStreamAMissingRankFailsTheGroup) {
    AllReduceConfig c = config_for("internal", WireType::F32, 0.5);
    std::unique_ptr<AllReduceEngine> engine = make_allreduce_engine(c);
    DeviceValues<float> d(c.cuda_devices[0], random_values<float>(1024, 3));
    CudaStream stream(c.cuda_devices[0]);
    engine->allreduce_on_stream(0, d.data(), 1024, stream.get());
    CurrentDevice current(c.cuda_devices[0]);
    check_cuda(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize", c.cuda_devices[0]);
    EXPECT_TRUE(engine->failed());
    EXPECT_NE(engine->error().find("waited longer"), std::string::npos) << engine->error();
}

TEST(CudaAllReduce, AMissingRankFailsTheGroupInTime) {
    for (const std::string & name : engines()) {
        AllReduceConfig c = config_for(name, WireType::F32, 0.5);
        std::unique_ptr<AllReduceEngine> engine = make_allreduce_engine(c);
        DeviceValues<float> d(c.cuda_devices[0], random_values<float>(1024, 3));
        engine->allreduce(0, d.data(), 1024);
        EXPECT_TRUE(engine->failed()) << name;
        EXPECT_NE(engine->error().find("did not"), std::string::npos) << engine->error();
    }
}

TEST(CudaAllReduce, TheInternalEngineComparesCountsEvenOfEmptyCalls) {
    AllReduceConfig c = config_for("internal", WireType::F32, 5.0);
    std::unique_ptr<AllReduceEngine> engine = make_allreduce_engine(c);
    DeviceValues<float> a(c.cuda_devices[0], random_values<float>(64, 5)),
        b(c.cuda_devices[1], random_values<float>(64, 6));
    std::thread t0([&] { engine->allreduce(0, a.data(), 0); });
    std::thread t1([&] { engine->allreduce(1, b.data(), 64); });
    t0.join();
    t1.join();
    EXPECT_TRUE(engine->failed());
    EXPECT_NE(engine->error().find("different element counts"), std::string::npos) << engine->error();
}

TEST(CudaAllReduce, AbortReleasesAWaitingRank) {
    for (const std::string & name : engines()) {
        AllReduceConfig c = config_for(name, WireType::F32, 30.0);
        std::unique_ptr<AllReduceEngine> engine = make_allreduce_engine(c);
        DeviceValues<float> d(c.cuda_devices[0], random_values<float>(1024, 4));
        std::thread waiter([&] { engine->allreduce(0, d.data(), 1024); });
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        engine->abort("test abort");
        waiter.join();
        EXPECT_TRUE(engine->failed());
        EXPECT_EQ(engine->error(), "test abort");
    }
}

// Split-invariant sums on a GPU: the device's doubles and floats are the host's.
TEST(CudaExactSum, KernelsGiveTheHostsBits) {
    const size_t n = 100003;
    std::vector<std::vector<float>> parts;
    std::vector<std::unique_ptr<DeviceValues<float>>> device_parts;
    std::vector<const float *> host_ptrs, device_ptrs;
    for (unsigned p = 0; p < 19; ++p) {  // three launches: 8, 8 and 3 parts
        std::vector<float> v = random_values<float>(n, 10 + p);
        for (size_t i = 0; i < n; i += 7) v[i] = std::ldexp(v[i], (int) (i % 25) - 12);
        parts.push_back(v);
        device_parts.push_back(std::make_unique<DeviceValues<float>>(0, v));
    }
    for (size_t p = 0; p < parts.size(); ++p) {
        host_ptrs.push_back(parts[p].data());
        device_ptrs.push_back(device_parts[p]->data());
    }
    std::unique_ptr<ExactSumKernels> kernels = make_cuda_exact_sum_kernels(0);
    for (bool accumulate : {false, true}) {
        SCOPED_TRACE(accumulate ? "accumulate" : "new sum");
        const std::vector<double> start = random_values<double>(n, 99);
        std::vector<double> host = start;
        exact_sum_range(host_ptrs.data(), (int) host_ptrs.size(), host.data(), accumulate, 0, n);
        DeviceValues<double> sum(0, start);
        kernels->sum(device_ptrs.data(), (int) device_ptrs.size(), sum.data(), accumulate, n, nullptr);
        const std::vector<double> device = sum.read();
        ASSERT_EQ(std::memcmp(device.data(), host.data(), n * sizeof(double)), 0);

        std::vector<float> rounded(n);
        exact_round_range(host.data(), rounded.data(), 0, n);
        DeviceValues<float> out(0, std::vector<float>(n, 0.0f));
        kernels->round(sum.data(), out.data(), n, nullptr);
        const std::vector<float> device_rounded = out.read();
        ASSERT_EQ(std::memcmp(device_rounded.data(), rounded.data(), n * sizeof(float)), 0);
    }
}

}  // namespace
}  // namespace llama_tp

int main(int argc, char ** argv) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        std::printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
