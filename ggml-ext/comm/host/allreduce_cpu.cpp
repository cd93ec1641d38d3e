#include "ggml-ext/comm/host/allreduce_cpu.h"

#include "ggml-ext/comm/allreduce_backoff.h"
#include "ggml-ext/comm/allreduce_wire.h"
#include "ggml-ext/error.h"

#include <algorithm>
#include <cstring>

namespace llama_tp {
namespace {

constexpr uint64_t kArrivedBits = 0xffffffffull;
constexpr uint64_t kPoisoned = 1ull << 32;
constexpr int kGenerationShift = 33;
constexpr uint64_t kGenerationUnit = 1ull << kGenerationShift;

// Slices start on 64-byte lines so two ranks never write the same line.
constexpr size_t kLineBytes = 64;
// Sums are built in a stack block that stays in L1 while every buffer adds to it.
constexpr size_t kBlockBytes = 4096;

uint64_t generation_of(uint64_t word) {
    return word >> kGenerationShift;
}

uint64_t all_ranks_bits(int n_ranks) {
    return (1ull << n_ranks) - 1;
}

int checked_rank_count(int n_ranks) {
    if (n_ranks < 1 || n_ranks > CpuAllReduce::kMaxRanks) {
        throw Error("allreduce engine cpu serves 1 to " + std::to_string(CpuAllReduce::kMaxRanks) + " ranks, not " +
                    std::to_string(n_ranks));
    }
    return n_ranks;
}

std::vector<int> ranks_missing_from(uint64_t word, int n_ranks) {
    std::vector<int> missing;
    for (int r = 0; r < n_ranks; ++r) {
        if (!(word & (1ull << r))) missing.push_back(r);
    }
    return missing;
}

}  // namespace

CpuAllReduce::CpuAllReduce(const AllReduceConfig & config)
    : n_ranks_(checked_rank_count(config.n_ranks)),
      wire_(config.wire.value_or(WireType::F32)),
      timeout_s_(config.timeout_s),
      slots_(n_ranks_) {}

bool CpuAllReduce::failed() const {
    return (barrier_.load(std::memory_order_acquire) & kPoisoned) != 0;
}

template <typename Why>
void CpuAllReduce::fail(Why why) {
    failure_.record([&] {
        barrier_.fetch_or(kPoisoned, std::memory_order_acq_rel);
        return std::string(why());
    });
}

void CpuAllReduce::abort(const std::string & why) {
    fail([&] { return why; });
}

template <typename T>
void CpuAllReduce::run(int rank, T * data, size_t n) {
    if (rank < 0 || rank >= n_ranks_) {
        fail([&] { return bad_rank_message(rank, n_ranks_); });
        return;
    }
    RankSlot & me = slots_[rank];
    me.data = data;
    me.n = n;
    me.element_size = sizeof(T);
    if (!arrive(rank)) return;
    const uint64_t call = ++me.calls;
    // Every rank sees the same published counts, so all of them take this exit together.
    if (!counts_match()) {
        fail([&] {
            std::vector<std::pair<int, size_t>> counts, sizes;
            for (int r = 0; r < n_ranks_; ++r) {
                counts.emplace_back(r, slots_[r].n);
                sizes.emplace_back(r, slots_[r].element_size);
            }
            const bool same_types =
                std::all_of(sizes.begin(), sizes.end(), [&](auto & s) { return s.second == sizes[0].second; });
            return same_types ? mismatched_counts_message(counts) : mismatched_types_message(sizes);
        });
        return;
    }
    reduce_slice<T>(rank, n);
    me.done.store(call, std::memory_order_release);
    await_slices(call);
}

// Returns true once every rank has arrived, false when the group failed
// first. Once any rank has seen the barrier open, others may be writing into
// this rank's buffer, so opening and poisoning are decided on one word.
bool CpuAllReduce::arrive(int rank) {
    const uint64_t bit = 1ull << rank;
    const uint64_t everyone = all_ranks_bits(n_ranks_);
    uint64_t word = barrier_.load(std::memory_order_acquire);
    for (;;) {
        if (word & kPoisoned) return false;
        const bool last = ((word & kArrivedBits) | bit) == everyone;
        const uint64_t next = last ? (word & ~kArrivedBits) + kGenerationUnit : word | bit;
        if (barrier_.compare_exchange_weak(word, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
            if (last) return true;
            break;
        }
    }
    const uint64_t generation = generation_of(word);
    Backoff backoff(timeout_s_);
    for (;;) {
        const uint64_t now = barrier_.load(std::memory_order_acquire);
        if (generation_of(now) != generation) return true;
        if (now & kPoisoned) return false;
        if (!backoff.pause()) return give_up_waiting(generation);
    }
}

// Poisons the barrier of this generation unless it opened meanwhile (then
// the call goes on as normal); names the ranks that never arrived.
bool CpuAllReduce::give_up_waiting(uint64_t generation) {
    bool opened = false;
    failure_.record([&] {
        uint64_t word = barrier_.load(std::memory_order_acquire);
        for (;;) {
            if (generation_of(word) != generation) {
                opened = true;
                return std::string();
            }
            if (word & kPoisoned) return std::string();
            if (barrier_.compare_exchange_weak(word, word | kPoisoned, std::memory_order_acq_rel,
                                               std::memory_order_acquire)) {
                return missing_ranks_message(ranks_missing_from(word, n_ranks_), timeout_s_, n_ranks_);
            }
        }
    });
    return opened;
}

// Ranks passing different element types would misread each other's values.
bool CpuAllReduce::counts_match() const {
    return std::all_of(slots_.begin(), slots_.end(), [&](const RankSlot & s) {
        return s.n == slots_[0].n && s.element_size == slots_[0].element_size;
    });
}

template <typename T>
void CpuAllReduce::reduce_slice(int rank, size_t n) {
    constexpr size_t per_line = kLineBytes / sizeof(T);
    constexpr size_t block = kBlockBytes / sizeof(T);
    const size_t per_rank_lines = (n + n_ranks_ * per_line - 1) / (n_ranks_ * per_line);
    const size_t per_rank = per_rank_lines * per_line;
    const size_t begin = std::min(rank * per_rank, n);
    const size_t end = std::min(begin + per_rank, n);

    T * buffers[kMaxRanks];
    for (int r = 0; r < n_ranks_; ++r) buffers[r] = static_cast<T *>(slots_[r].data);

    T sum[block];
    for (size_t offset = begin; offset < end; offset += block) {
        const size_t len = std::min(block, end - offset);
        wire_copy(sum, buffers[0] + offset, len, wire_);
        for (int r = 1; r < n_ranks_; ++r) wire_add(sum, buffers[r] + offset, len, wire_);
        for (int r = 0; r < n_ranks_; ++r) std::memcpy(buffers[r] + offset, sum, len * sizeof(T));
    }
}

template void CpuAllReduce::run<float>(int, float *, size_t);
template void CpuAllReduce::run<double>(int, double *, size_t);

// Waits until every rank has written its slice. Not abandoned on failure or
// timeout: the other ranks are past the arrival barrier and writing into
// this rank's buffer, and their bounded copy loops finish soon.
void CpuAllReduce::await_slices(uint64_t call) const {
    Backoff backoff = Backoff::unbounded();
    for (const RankSlot & slot : slots_) {
        while (slot.done.load(std::memory_order_acquire) < call) backoff.pause();
    }
}

}  // namespace llama_tp
