// llama-tp-allreduce-bench: latency of one AllReduce engine across message
// sizes (4 KiB to 16 MiB, powers of 4), with ranks as threads of this
// process, or under mpirun in several processes (--engine mpi): median, p10
// and p90 of rank 0's time inside allreduce() per call, and the effective
// bandwidth.

#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/error.h"
#include "ggml-ext/comm/process_group.h"
#ifdef LLAMA_TP_HAVE_CUDA
#include "ggml-ext/gpu/cuda_runtime.h"
#endif

#include <algorithm>  // before args.h, which uses std::min and std::move
#include <utility>

#include "tools/common/args.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <optional>
#include <thread>
#include <vector>

namespace llama_tp {
namespace {

const char * kUsage =
    "usage: llama-tp-allreduce-bench [options]\n"
    "  --engine NAME   cpu | butterfly | auto (default cpu; with --cuda auto); under mpirun: mpi,\n"
    "                  or nccl with --cuda (one device per rank across the processes)\n"
    "  --ranks N       ranks, one thread each (default 2; under mpirun: per process, default 1)\n"
    "  --wire TYPE     f32 | bf16 | f64 | auto (default f32; f64: the doubles of\n"
    "                  split-invariant sums; auto: the engine's, as when no wire is asked for;\n"
    "                  the GPU engines' sizes follow their environment variables)\n"
    "  --iters K       most calls measured per size (default 1000; fewer for large sizes, about 1.5 s each)\n"
    "  --cuda D,D..    the ranks' values in these CUDA devices' memory, one per rank (CUDA builds;\n"
    "                  engines auto, nccl, internal, or a host engine through host copies)\n"
    "  --on-stream     with --cuda: each call queued on its rank's stream and waited for there\n"
    "                  (as the ranks' graphs run them), not through the engine's own waits\n"
    "  --json          print one JSON object\n";

constexpr size_t kSmallestBytes = 4096;
constexpr size_t kLargestBytes = 16u << 20;
constexpr int kWarmupCalls = 5;
// Keeps the whole run near 10 s: large sizes get fewer calls.
constexpr double kSecondsPerSize = 1.5;

struct Options {
    std::string engine = "cpu";
    int ranks = 0;                                 // 0: the default for the launch
    std::optional<WireType> wire = WireType::F32;  // unset: the engine's
    bool f64 = false;                              // doubles (exact on any wire)
    int iters = 1000;
    bool json = false;
    std::vector<int> cuda_devices;  // --cuda
    bool on_stream = false;
};

Options parse(int argc, char ** argv) {
    Options o;
    bool engine_given = false;
    ArgReader a(argc, argv, kUsage);
    while (!a.done()) {
        const std::string f = a.next();
        if (f == "--engine") {
            o.engine = a.value(f);
            engine_given = true;
        } else if (f == "--ranks") {
            o.ranks = (int) a.integer(f, 1, 64);
        } else if (f == "--wire") {
            const std::string w = a.value(f);
            if (w != "f32" && w != "bf16" && w != "f64" && w != "auto") {
                a.fail("invalid value '" + w + "' for --wire (expected f32, bf16, f64 or auto)");
            }
            o.wire = w == "auto" ? std::nullopt : std::optional<WireType>(w == "bf16" ? WireType::BF16 : WireType::F32);
            o.f64 = w == "f64";
        } else if (f == "--iters") {
            o.iters = (int) a.integer(f, 1, 1000000);
        } else if (f == "--json") {
            o.json = true;
        } else if (f == "--cuda") {
#ifndef LLAMA_TP_HAVE_CUDA
            a.fail("--cuda needs a CUDA build (LLAMA_TP_CUDA=ON)");
#endif
            for (float d : a.reals(f)) o.cuda_devices.push_back((int) d);
            if (!engine_given) o.engine = "auto";
        } else if (f == "--on-stream") {
            o.on_stream = true;
        } else if (f == "-h" || f == "--help") {
            a.help();
        } else {
            a.fail("unknown argument " + f);
        }
    }
    if (o.on_stream && o.cuda_devices.empty()) a.fail("--on-stream needs --cuda");
    return o;
}

struct SizeResult {
    size_t bytes = 0;
    int iters = 0;
    double median_us = 0, p10_us = 0, p90_us = 0;
    double algbw_gbps = 0;  // bytes / median time
    double busbw_gbps = 0;  // algbw * 2(n-1)/n: the traffic a ring would move per rank, for comparison
};

const char * wire_name(const Options & o) {
    return o.f64 ? "f64" : !o.wire ? "auto" : o.wire == WireType::F32 ? "f32" : "bf16";
}

// Each local rank's values: host memory, or its CUDA device's with --cuda.
class RankBuffers {
  public:
    RankBuffers(int n_ranks, size_t bytes, const std::vector<int> & cuda_devices) : cuda_devices_(cuda_devices) {
        if (cuda_devices.empty()) {
            // Values do not change the speed; zeros stay finite over any number of calls.
            host_.assign(n_ranks, std::vector<float>(bytes / sizeof(float), 0.0f));
            for (auto & h : host_) data_.push_back(h.data());
            return;
        }
#ifdef LLAMA_TP_HAVE_CUDA
        if ((int) cuda_devices.size() != n_ranks) throw Error("--cuda names one device per rank");
        for (int device : cuda_devices) {
            CurrentDevice current(device);
            void * p = nullptr;
            check_cuda(cudaMalloc(&p, bytes), "cudaMalloc", device);
            data_.push_back(static_cast<float *>(p));
            check_cuda(cudaMemset(p, 0, bytes), "cudaMemset", device);
        }
#endif
    }
    ~RankBuffers() {
#ifdef LLAMA_TP_HAVE_CUDA
        for (size_t r = 0; host_.empty() && r < data_.size(); ++r) {
            CurrentDevice current(cuda_devices_[r]);
            (void) cudaFree(data_[r]);
        }
#endif
    }
    RankBuffers(const RankBuffers &) = delete;
    RankBuffers & operator=(const RankBuffers &) = delete;
    size_t size() const {
        return data_.size();
    }
    float * operator[](size_t rank) const {
        return data_[rank];
    }

  private:
    std::vector<int> cuda_devices_;
    std::vector<std::vector<float>> host_;
    std::vector<float *> data_;
};

// One call of a rank: through the engine's own waits, or queued on the
// rank's stream and waited for there (--on-stream).
class RankCall {
  public:
    RankCall(AllReduceEngine & engine, const Options & o, int local_rank, int rank) : engine_(engine), rank_(rank) {
#ifdef LLAMA_TP_HAVE_CUDA
        if (o.on_stream) stream_ = std::make_unique<CudaStream>(o.cuda_devices[local_rank]);
#else
        (void) o;
        (void) local_rank;
#endif
    }
    void operator()(void * data, size_t bytes, bool f64) {
#ifdef LLAMA_TP_HAVE_CUDA
        if (stream_) {
            if (f64) {
                engine_.allreduce_on_stream(rank_, static_cast<double *>(data), bytes / sizeof(double), stream_->get());
            } else {
                engine_.allreduce_on_stream(rank_, static_cast<float *>(data), bytes / sizeof(float), stream_->get());
            }
            // Polled, as the engines wait: a blocking wait can add a scheduler tick.
            const std::atomic<bool> never{false};
            CurrentDevice current(stream_->device());
            if (!wait_for_stream(stream_->get(), stream_->device(), 30.0, never)) {
                throw Error("a call on a stream did not end in 30 s");
            }
            return;
        }
#endif
        if (f64) {
            engine_.allreduce(rank_, static_cast<double *>(data), bytes / sizeof(double));
        } else {
            engine_.allreduce(rank_, static_cast<float *>(data), bytes / sizeof(float));
        }
    }

  private:
    AllReduceEngine & engine_;
    int rank_;
#ifdef LLAMA_TP_HAVE_CUDA
    std::unique_ptr<CudaStream> stream_;
#endif
};

// Runs `calls` allreduces of `bytes` (floats, or doubles with f64) on every
// rank; returns rank 0's time per call in microseconds.
std::vector<double> time_calls(AllReduceEngine & engine, const Options & o, int first_rank, const RankBuffers & buffers,
                               size_t bytes, bool f64, int calls) {
    std::vector<double> rank0_us(calls);
    auto body = [&](int rank) {
        RankCall call(engine, o, rank, first_rank + rank);
        for (int i = 0; i < calls; ++i) {
            const auto start = std::chrono::steady_clock::now();
            call(buffers[rank], bytes, f64);
            if (rank == 0) {
                rank0_us[i] =
                    std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
            }
        }
    };
    std::vector<std::thread> threads;
    for (int r = 0; r < (int) buffers.size(); ++r) threads.emplace_back(body, r);
    for (std::thread & t : threads) t.join();
    if (engine.failed()) throw Error(engine.error());
    return rank0_us;
}

double percentile(const std::vector<double> & sorted, double fraction) {
    return sorted[(size_t) (fraction * (sorted.size() - 1) + 0.5)];
}

// Every process must make the same number of calls: process 0's count.
int agreed_iters(ProcessGroup * processes, int iters) {
    if (!processes) return iters;
    std::vector<uint8_t> bytes(sizeof iters);
    std::memcpy(bytes.data(), &iters, sizeof iters);
    processes->broadcast(bytes);
    std::memcpy(&iters, bytes.data(), sizeof iters);
    return iters;
}

SizeResult measure(AllReduceEngine & engine, const Options & o, ProcessGroup * processes, const RankBuffers & buffers,
                   size_t bytes) {
    const bool f64 = o.f64;
    const int max_iters = o.iters;
    const int first_rank = processes ? processes->rank() * (int) buffers.size() : 0;
    std::vector<double> warmup = time_calls(engine, o, first_rank, buffers, bytes, f64, kWarmupCalls);
    std::sort(warmup.begin(), warmup.end());
    const double estimate_us = std::max(percentile(warmup, 0.5), 0.01);
    const int iters =
        agreed_iters(processes, std::clamp((int) (kSecondsPerSize * 1e6 / estimate_us), kWarmupCalls, max_iters));

    std::vector<double> us = time_calls(engine, o, first_rank, buffers, bytes, f64, iters);
    std::sort(us.begin(), us.end());
    SizeResult r;
    r.bytes = bytes;
    r.iters = iters;
    r.median_us = percentile(us, 0.5);
    r.p10_us = percentile(us, 0.1);
    r.p90_us = percentile(us, 0.9);
    r.algbw_gbps = bytes / (r.median_us * 1e3);
    const int ranks = engine.n_ranks();
    r.busbw_gbps = r.algbw_gbps * 2.0 * (ranks - 1) / ranks;
    return r;
}

std::string size_text(size_t bytes) {
    return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes >> 10) + " KiB";
}

void print_table(const Options & o, const AllReduceEngine & engine, const std::vector<SizeResult> & results) {
    std::printf("allreduce %s%s, %d ranks, wire %s (rank 0's time per call)\n", engine.name(),
                o.on_stream ? " on streams" : "", engine.n_ranks(), wire_name(o));
    std::printf("%10s %7s %11s %11s %11s %11s %11s\n", "size", "iters", "median_us", "p10_us", "p90_us", "algbw_GB/s",
                "busbw_GB/s");
    for (const SizeResult & r : results) {
        std::printf("%10s %7d %11.2f %11.2f %11.2f %11.2f %11.2f\n", size_text(r.bytes).c_str(), r.iters, r.median_us,
                    r.p10_us, r.p90_us, r.algbw_gbps, r.busbw_gbps);
    }
}

void print_json(const Options & o, const AllReduceEngine & engine, const std::vector<SizeResult> & results) {
    std::printf("{\"engine\": \"%s\", \"on_stream\": %s, \"ranks\": %d, \"wire\": \"%s\", \"results\": [",
                engine.name(), o.on_stream ? "true" : "false", engine.n_ranks(), wire_name(o));
    for (size_t i = 0; i < results.size(); ++i) {
        const SizeResult & r = results[i];
        std::printf(
            "%s{\"bytes\": %zu, \"iters\": %d, \"median_us\": %.3f, \"p10_us\": %.3f, \"p90_us\": %.3f, "
            "\"algbw_gbps\": %.3f, \"busbw_gbps\": %.3f}",
            i ? ", " : "", r.bytes, r.iters, r.median_us, r.p10_us, r.p90_us, r.algbw_gbps, r.busbw_gbps);
    }
    std::printf("]}\n");
}

// Under mpirun the ranks of every process form one group (engine mpi).
std::unique_ptr<AllReduceEngine> make_engine(const Options & o, ProcessGroup * processes, int local_ranks) {
    AllReduceConfig config;
    config.engine = o.engine;
    config.n_ranks = local_ranks;
    config.wire = o.wire;
    config.gpu_sizes = GpuAllReduceSizes::from_env();
    if (!o.cuda_devices.empty()) {
        config.memory = RankMemory::Cuda;
        config.cuda_devices = o.cuda_devices;
    }
    config.processes = processes;
    return make_allreduce_engine(config);
}

int run(const Options & o, ProcessGroup * processes) {
    const int local_ranks = o.ranks > 0 ? o.ranks : processes ? 1 : 2;
    std::unique_ptr<AllReduceEngine> engine = make_engine(o, processes, local_ranks);
    if (!o.cuda_devices.empty() && !engine->takes_device_memory()) {
        throw Error(std::string("engine ") + engine->name() + " takes host memory, not --cuda devices' memory");
    }
    if (o.on_stream && !engine->runs_on_stream()) {
        throw Error(std::string("engine ") + engine->name() + " does not run on a stream (--on-stream)");
    }
    const RankBuffers buffers(local_ranks, kLargestBytes, o.cuda_devices);
    std::vector<SizeResult> results;
    for (size_t bytes = kSmallestBytes; bytes <= kLargestBytes; bytes *= 4) {
        results.push_back(measure(*engine, o, processes, buffers, bytes));
    }
    if (processes && processes->rank() != 0) return 0;
    if (o.json) {
        print_json(o, *engine, results);
    } else {
        print_table(o, *engine, results);
    }
    return 0;
}

}  // namespace
}  // namespace llama_tp

int main(int argc, char ** argv) {
    // Outlives the error message (see ProcessGroup's destructor).
    std::unique_ptr<llama_tp::ProcessGroup> processes;
    try {
        const llama_tp::Options o = llama_tp::parse(argc, argv);
        processes = llama_tp::join_launched_processes(llama_tp::kProcessTimeout_s);
        const int rc = llama_tp::run(o, processes.get());
        if (processes) processes->end_together();  // every process made the same calls
        return rc;
    } catch (const llama_tp::Error & e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
