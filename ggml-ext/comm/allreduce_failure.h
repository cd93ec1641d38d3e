#pragma once
// The failure state an engine's group shares: the first error message, kept
// under a lock that is held while the group is marked failed, so a rank that
// sees the failure and then asks for the message always finds it.

#include "ggml-ext/comm/allreduce_engine.h"

#include <atomic>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace llama_tp {

class FailureRecord {
  public:
    // Runs fail() under the lock. fail() marks the group failed when it
    // should and returns the reason, or "" when this call failed nothing
    // (another rank did, or the wait it was about to abandon completed).
    // The first reason is kept. Never throws.
    template <typename Fail>
    void record(Fail fail) noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        try {
            std::string why = fail();
            if (message_.empty()) message_ = std::move(why);
        } catch (...) {
            // Out of memory while building the message: the group is failed all the same.
        }
    }

    // The first reason recorded; a generic one if none could be kept.
    std::string message() const;

  private:
    mutable std::mutex mutex_;
    std::string message_;
};

// A group's failed flag with its first reason, as the butterfly, none and
// mpi engines keep it (the cpu engine keeps its flag in its barrier word and
// uses FailureRecord directly).
// Sequentially consistent, so that a wait may reason about the flag
// together with other counters (see MpiAllReduce::run).
class GroupFailure {
  public:
    bool failed() const { return failed_.load(); }
    std::string message() const { return record_.message(); }
    // The flag itself, for waits that give up once the group has failed.
    const std::atomic<bool> & flag() const { return failed_; }

    // Marks the group failed; why() builds the reason, kept if it is the
    // first. Never throws.
    template <typename Why>
    void fail(Why why) noexcept {
        record_.record([&] {
            failed_.store(true);
            return std::string(why());
        });
    }

  private:
    std::atomic<bool> failed_{false};
    FailureRecord record_;
};

// An engine whose failure is one GroupFailure: failed(), error() and
// abort() in one place for the engines that keep it so.
class AllReduceWithGroupFailure : public AllReduceEngine {
  public:
    bool failed() const override { return failure_.failed(); }
    std::string error() const override { return failure_.message(); }
    void abort(const std::string & why) override {
        failure_.fail([&] { return why; });
    }

  protected:
    GroupFailure failure_;
};

// "allreduce: rank 1 did not arrive within 30.0 s (group of 2)", or "ranks 1, 3 ...".
std::string missing_ranks_message(const std::vector<int> & missing, double timeout_s, int n_ranks);

// "allreduce: ranks called with different element counts (rank 0: 4096, rank 1: 4095)".
std::string mismatched_counts_message(std::vector<std::pair<int, size_t>> rank_counts);

// "allreduce: ranks called with different element types (rank 0: f32, rank 1: f64)",
// from each rank's element size in bytes.
std::string mismatched_types_message(std::vector<std::pair<int, size_t>> rank_sizes);

// One rank's call, as another rank sees it.
struct RankCall {
    int rank = 0;
    size_t n = 0;
    size_t element_size = 0;
};
// "" where two ranks' calls match; else mismatched_types_message or
// mismatched_counts_message for them.
std::string call_mismatch(const RankCall & mine, const RankCall & theirs);

// "allreduce: rank 5 is out of range for a group of 2".
std::string bad_rank_message(int rank, int n_ranks);

}  // namespace llama_tp
