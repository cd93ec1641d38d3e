#include "tools/common/memory_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace llama_tp {

namespace {

uint64_t sum_range(const uint64_t * p, size_t n) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        a += p[i];
        b += p[i + 1];
        c += p[i + 2];
        d += p[i + 3];
    }
    return a ^ b ^ c ^ d;
}

}  // namespace

double measure_read_bandwidth(int n_threads) {
    n_threads = std::max(1, n_threads);
    const size_t n = (size_t) 512 << 20 >> 3;  // 512 MiB of uint64
    std::vector<uint64_t> buf(n);
    for (size_t i = 0; i < n; i += 512) buf[i] = i;  // touch every page
    std::atomic<uint64_t> sink{0};
    double best = 0.0;
    for (int pass = 0; pass < 4; ++pass) {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> threads;
        const size_t chunk = n / (size_t) n_threads;
        for (int t = 0; t < n_threads; ++t) {
            threads.emplace_back([&, t] { sink ^= sum_range(buf.data() + chunk * t, chunk); });
        }
        for (auto & th : threads) th.join();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, (double) (n * sizeof(uint64_t)) / s);
    }
    return sink.load() == 42 ? best + 0.0 : best;
}

}  // namespace llama_tp
