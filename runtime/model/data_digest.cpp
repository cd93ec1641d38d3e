#include "runtime/model/data_digest.h"

#include "runtime/model/gguf_file.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace llama_tp {
namespace {

constexpr uint64_t kPrime1 = 0x9e3779b185ebca87ull;
constexpr uint64_t kPrime2 = 0xc2b2ae3d27d4eb4full;
constexpr uint64_t kPrime3 = 0x165667b19e3779f9ull;
// Large enough that a read costs far more than its bookkeeping, small
// enough that every thread of a small model gets some.
constexpr uint64_t kChunk = 16ull << 20;

uint64_t rotl(uint64_t x, int r) {
    return (x << r) | (x >> (64 - r));
}

uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= kPrime2;
    h ^= h >> 29;
    h *= kPrime3;
    h ^= h >> 32;
    return h;
}

uint64_t lane(uint64_t acc, uint64_t word) {
    return rotl(acc + word * kPrime2, 31) * kPrime1;
}

// One chunk of one part: where it is and its digest once read.
struct Chunk {
    int part;
    uint64_t at, n;
    uint64_t digest = 0;
};

}  // namespace

uint64_t digest_bytes(const void * data, size_t n, uint64_t seed) {
    const auto * p = static_cast<const uint8_t *>(data);
    // Four independent lanes keep the multiplier busy; the tail goes through the first.
    uint64_t a = seed + kPrime1, b = seed ^ kPrime2, c = seed, d = seed - kPrime1;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint64_t w[4];
        std::memcpy(w, p + i, sizeof w);
        a = lane(a, w[0]);
        b = lane(b, w[1]);
        c = lane(c, w[2]);
        d = lane(d, w[3]);
    }
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        std::memcpy(&w, p + i, sizeof w);
        a = lane(a, w);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, p + i, n - i);
    a = lane(a, tail ^ ((uint64_t) (n - i) << 56));
    return mix(rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18) + (uint64_t) n * kPrime3);
}

uint64_t tensor_data_digest(const GgufFile & file, int n_threads) {
    std::vector<Chunk> chunks;
    for (int p = 0; p < file.n_parts(); ++p) {
        const GgufFile::DataRange r = file.part_data(p);
        for (uint64_t at = r.begin; at < r.end; at += kChunk) chunks.push_back({p, at, std::min(kChunk, r.end - at)});
    }
    std::atomic<size_t> next{0};
    std::mutex error_mutex;
    std::exception_ptr error;
    auto work = [&] {
        std::vector<uint8_t> buffer(kChunk);
        for (size_t i; (i = next.fetch_add(1)) < chunks.size();) {
            Chunk & c = chunks[i];
            try {
                file.read_part(c.part, c.at, buffer.data(), (size_t) c.n);
            } catch (...) {
                std::lock_guard<std::mutex> lock(error_mutex);
                if (!error) error = std::current_exception();
                next = chunks.size();
                return;
            }
            c.digest = digest_bytes(buffer.data(), (size_t) c.n, i);
        }
    };
    std::vector<std::thread> threads;
    const int n = std::max(1, std::min<int>(n_threads, (int) chunks.size()));
    for (int t = 1; t < n; ++t) threads.emplace_back(work);
    work();
    for (auto & t : threads) t.join();
    if (error) std::rethrow_exception(error);
    uint64_t h = mix((uint64_t) chunks.size());
    for (const Chunk & c : chunks) h = mix(h ^ (c.digest + kPrime1 + (h << 6) + (h >> 2)));
    return h;
}

}  // namespace llama_tp
