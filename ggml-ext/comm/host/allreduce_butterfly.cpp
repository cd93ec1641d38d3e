#include "ggml-ext/comm/host/allreduce_butterfly.h"

#include "ggml-ext/comm/allreduce_backoff.h"
#include "ggml-ext/comm/allreduce_wire.h"
#include "ggml-ext/error.h"

namespace llama_tp {
namespace {

int checked_rank_count(int n_ranks) {
    if (n_ranks < 1) throw Error("allreduce engine butterfly needs at least 1 rank, not " + std::to_string(n_ranks));
    return n_ranks;
}

int largest_power_of_two_at_most(int n) {
    int p = 1;
    while (p * 2 <= n) p *= 2;
    return p;
}

int log2_of(int power_of_two) {
    int levels = 0;
    while ((1 << levels) < power_of_two) ++levels;
    return levels;
}

}  // namespace

ButterflyAllReduce::ButterflyAllReduce(const AllReduceConfig & config)
    : n_ranks_(checked_rank_count(config.n_ranks)),
      wire_(config.wire.value_or(WireType::F32)),
      timeout_s_(config.timeout_s),
      paired_ranks_(largest_power_of_two_at_most(n_ranks_)),
      levels_(log2_of(paired_ranks_)),
      steps_per_call_(levels_ + 2),
      slots_(n_ranks_) {}

template <typename T>
void ButterflyAllReduce::run(int rank, T * data, size_t n) {
    if (failed()) return;
    if (rank < 0 || rank >= n_ranks_) {
        failure_.fail([&] { return bad_rank_message(rank, n_ranks_); });
        return;
    }
    RankSlot & me = slots_[rank];
    const Turn<T> turn{rank, data, n, me.calls++};
    me.entered.store(me.calls, std::memory_order_release);
    if (rank >= paired_ranks_) {
        run_folded(turn);
    } else {
        run_paired(turn);
    }
}

// An extra rank: hands its values to its partner, then takes the final sum.
template <typename T>
bool ButterflyAllReduce::run_folded(const Turn<T> & turn) {
    const int partner = turn.rank - paired_ranks_;
    return post(turn, partner, step_number(turn.call, 0), wire_) &&
           receive(turn, partner, step_number(turn.call, levels_ + 1), false);
}

template <typename T>
bool ButterflyAllReduce::run_paired(const Turn<T> & turn) {
    const int extra = turn.rank + paired_ranks_;
    const bool has_extra = extra < n_ranks_;
    if (has_extra && !receive(turn, extra, step_number(turn.call, 0), true)) return false;
    for (int level = 0; level < levels_; ++level) {
        const int partner = turn.rank ^ (1 << level);
        const uint64_t step = step_number(turn.call, level + 1);
        if (!post(turn, partner, step, wire_) || !receive(turn, partner, step, true)) return false;
    }
    // The final sum goes to the extra rank exactly, so it matches its partner bit for bit.
    return !has_extra || post(turn, extra, step_number(turn.call, levels_ + 1), WireType::F32);
}

// Copies this rank's values into its staging for `reader`, once the previous
// reader of the staging has finished with it.
template <typename T>
bool ButterflyAllReduce::post(const Turn<T> & turn, int reader, uint64_t step, WireType wire) {
    RankSlot & me = slots_[turn.rank];
    if (me.last_reader >= 0 && !wait_for(turn.call, slots_[me.last_reader].consumed, me.last_post, me.last_reader)) {
        return false;
    }
    const size_t words = (turn.n * sizeof(T) + sizeof(double) - 1) / sizeof(double);
    try {
        if (me.staging.size() < words) me.staging.resize(words);
    } catch (...) {
        failure_.fail(
            [&] { return "allreduce: out of memory for a " + std::to_string(turn.n) + "-element staging buffer"; });
        return false;
    }
    wire_copy(reinterpret_cast<T *>(me.staging.data()), turn.data, turn.n, wire);
    me.posted_n = turn.n;
    me.posted_size = sizeof(T);
    me.last_reader = reader;
    me.last_post = step;
    me.posted.store(step, std::memory_order_release);
    return true;
}

// Takes `from`'s staged values: adds them (both operands as on the wire) or
// copies them over this rank's values.
template <typename T>
bool ButterflyAllReduce::receive(const Turn<T> & turn, int from, uint64_t step, bool add) {
    const RankSlot & peer = slots_[from];
    if (!wait_for(turn.call, peer.posted, step, from)) return false;
    if (peer.posted_size != sizeof(T)) {
        failure_.fail([&] { return mismatched_types_message({{turn.rank, sizeof(T)}, {from, peer.posted_size}}); });
        return false;
    }
    if (peer.posted_n != turn.n) {
        failure_.fail([&] { return mismatched_counts_message({{turn.rank, turn.n}, {from, peer.posted_n}}); });
        return false;
    }
    const T * staged = reinterpret_cast<const T *>(peer.staging.data());
    if (add) {
        wire_copy(turn.data, turn.data, turn.n, wire_);
        wire_add(turn.data, staged, turn.n, WireType::F32);
    } else {
        wire_copy(turn.data, staged, turn.n, WireType::F32);
    }
    slots_[turn.rank].consumed.store(step, std::memory_order_release);
    return true;
}

bool ButterflyAllReduce::wait_for(uint64_t call, const std::atomic<uint64_t> & flag, uint64_t at_least, int awaited) {
    Backoff backoff(timeout_s_);
    while (flag.load(std::memory_order_acquire) < at_least) {
        if (failed()) return false;
        if (!backoff.pause()) {
            fail_timeout(call, awaited);
            return false;
        }
    }
    return true;
}

// Names the ranks that have not entered this call; if all have, the one
// this rank was waiting for.
void ButterflyAllReduce::fail_timeout(uint64_t call, int awaited) {
    failure_.fail([&] {
        std::vector<int> missing;
        for (int r = 0; r < n_ranks_; ++r) {
            if (slots_[r].entered.load(std::memory_order_acquire) <= call) missing.push_back(r);
        }
        if (missing.empty()) missing.push_back(awaited);
        return missing_ranks_message(missing, timeout_s_, n_ranks_);
    });
}

template void ButterflyAllReduce::run<float>(int, float *, size_t);
template void ButterflyAllReduce::run<double>(int, double *, size_t);

}  // namespace llama_tp
