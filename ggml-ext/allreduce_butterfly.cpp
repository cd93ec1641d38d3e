#include "ggml-ext/allreduce_butterfly.h"

#include "ggml-ext/allreduce_backoff.h"
#include "ggml-ext/allreduce_wire.h"
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
      wire_(config.wire),
      timeout_s_(config.timeout_s),
      paired_ranks_(largest_power_of_two_at_most(n_ranks_)),
      levels_(log2_of(paired_ranks_)),
      steps_per_call_(levels_ + 2),
      slots_(n_ranks_) {}

template <typename Why>
void ButterflyAllReduce::fail(Why why) {
    failure_.record([&] {
        failed_.store(true, std::memory_order_release);
        return std::string(why());
    });
}

void ButterflyAllReduce::abort(const std::string & why) {
    fail([&] { return why; });
}

void ButterflyAllReduce::allreduce(int rank, float * data, size_t n) {
    if (failed()) return;
    if (rank < 0 || rank >= n_ranks_) {
        fail([&] { return bad_rank_message(rank, n_ranks_); });
        return;
    }
    RankSlot & me = slots_[rank];
    const Turn turn{rank, data, n, me.calls++};
    me.entered.store(me.calls, std::memory_order_release);
    if (rank >= paired_ranks_) {
        run_folded(turn);
    } else {
        run_paired(turn);
    }
}

// An extra rank: hands its values to its partner, then takes the final sum.
bool ButterflyAllReduce::run_folded(const Turn & turn) {
    const int partner = turn.rank - paired_ranks_;
    return post(turn, partner, step_number(turn.call, 0), wire_) &&
           receive(turn, partner, step_number(turn.call, levels_ + 1), false);
}

bool ButterflyAllReduce::run_paired(const Turn & turn) {
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
bool ButterflyAllReduce::post(const Turn & turn, int reader, uint64_t step, WireType wire) {
    RankSlot & me = slots_[turn.rank];
    if (me.last_reader >= 0 && !wait_for(turn, slots_[me.last_reader].consumed, me.last_post, me.last_reader)) {
        return false;
    }
    try {
        if (me.staging.size() < turn.n) me.staging.resize(turn.n);
    } catch (...) {
        fail([&] { return "allreduce: out of memory for a " + std::to_string(turn.n) + "-element staging buffer"; });
        return false;
    }
    wire_copy(me.staging.data(), turn.data, turn.n, wire);
    me.posted_n = turn.n;
    me.last_reader = reader;
    me.last_post = step;
    me.posted.store(step, std::memory_order_release);
    return true;
}

// Takes `from`'s staged values: adds them (both operands as on the wire) or
// copies them over this rank's values.
bool ButterflyAllReduce::receive(const Turn & turn, int from, uint64_t step, bool add) {
    const RankSlot & peer = slots_[from];
    if (!wait_for(turn, peer.posted, step, from)) return false;
    if (peer.posted_n != turn.n) {
        fail([&] { return mismatched_counts_message({{turn.rank, turn.n}, {from, peer.posted_n}}); });
        return false;
    }
    if (add) {
        wire_copy(turn.data, turn.data, turn.n, wire_);
        wire_add(turn.data, peer.staging.data(), turn.n, WireType::F32);
    } else {
        wire_copy(turn.data, peer.staging.data(), turn.n, WireType::F32);
    }
    slots_[turn.rank].consumed.store(step, std::memory_order_release);
    return true;
}

bool ButterflyAllReduce::wait_for(const Turn & turn, const std::atomic<uint64_t> & flag, uint64_t at_least,
                                  int awaited) {
    Backoff backoff(timeout_s_);
    while (flag.load(std::memory_order_acquire) < at_least) {
        if (failed()) return false;
        if (!backoff.pause()) {
            fail_timeout(turn, awaited);
            return false;
        }
    }
    return true;
}

// Names the ranks that have not entered this call; if all have, the one
// this rank was waiting for.
void ButterflyAllReduce::fail_timeout(const Turn & turn, int awaited) {
    fail([&] {
        std::vector<int> missing;
        for (int r = 0; r < n_ranks_; ++r) {
            if (slots_[r].entered.load(std::memory_order_acquire) <= turn.call) missing.push_back(r);
        }
        if (missing.empty()) missing.push_back(awaited);
        return missing_ranks_message(missing, timeout_s_, n_ranks_);
    });
}

}  // namespace llama_tp
