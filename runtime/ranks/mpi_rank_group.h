#pragma once
// Ranks in several processes launched by MPI, each process holding a
// ThreadRankGroup of its own ranks. Process 0 drives: it broadcasts every
// step, runs its own ranks, and gathers the other processes' vocabulary
// slices of the logits (and their ranks' collective figures). The others
// follow: receive a step, run it, send their slice, until a shutdown step.
// While no step runs, process 0 sends a heartbeat every
// kHeartbeatInterval_s: a process stopped or gone while the group idles
// fails the group within a step's timeout (failure() says so).

#include "ggml-ext/comm/process_group.h"
#include "runtime/kv/kv_image.h"
#include "runtime/ranks/rank_group.h"
#include "ggml-ext/shard_range.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace llama_tp {

class MpiRankGroup final : public RankGroup {
  public:
    // local: this process's ranks; vocab: the rows of the output head they
    // hold together, kv_heads their KV heads of every layer (every
    // process's, in process order); image_layout: a KV image's layout for n
    // cells.
    MpiRankGroup(ProcessGroup & processes, std::unique_ptr<RankGroup> local, std::vector<ShardRange> vocab,
                 int32_t n_vocab, std::vector<std::vector<ShardRange>> kv_heads,
                 std::function<KvImageLayout(int32_t)> image_layout);
    // Process 0 stops its heartbeat and ends the group's follow() loops.
    ~MpiRankGroup() override;

    // Every process states its setup (one "key: value" per line); process 0
    // compares them and every process throws the same llama_tp::Error, naming
    // the process, its host and what differs, when one does not match.
    // `source` (the files the setup was read from, which may be named
    // differently on each host) is not compared, only named.
    static void agree(ProcessGroup & processes, const std::string & setup, const std::string & source = "");

    int n_ranks() const override { return n_ranks_; }
    void run(const Step & step, float * logits) override;
    // Every process reads its ranks' heads; process 0 joins them into image.
    void read(const Step & step, uint8_t * image) override;  // process 0
    // The followers' loop; returns after the shutdown step. Throws
    // llama_tp::Error when a step fails here.
    void follow();

    std::vector<RankReport> reports() const override { return reports_; }
    const std::vector<float> & hidden_rows() const override { return local_->hidden_rows(); }
    std::vector<CollectiveStats> collective_stats() const override;
    int64_t graph_builds() const override { return local_->graph_builds(); }
    std::string allreduce_name() const override { return local_->allreduce_name(); }
    bool allreduce_rounds_to_bf16() const override { return local_->allreduce_rounds_to_bf16(); }
    std::string failure() const override;
    void abort(const std::string & why) override { local_->abort(why); }

  private:
    // This process's part of a step's result: its ranks' collective figures
    // and its vocabulary slice of every output row.
    std::vector<uint8_t> pack(const std::vector<float> & rows, size_t n_rows) const;
    void unpack(int process, const std::vector<uint8_t> & part, size_t n_rows, float * logits);
    void gather_reports();
    // Process 0's side of a step: refused once the group has failed; the
    // step goes to every process, `here` runs this process's part, and each
    // other process's reply goes to `join` (a failure is kept for good).
    using Join = std::function<void(int process, const std::vector<uint8_t> & part)>;
    void drive(const Step & step, const std::function<void()> & here, const Join & join,
               Patience patience = Patience::Step);
    // Process 0's heartbeat thread: a Heartbeat step whenever no step ran
    // for kHeartbeatInterval_s, until the group fails or ends.
    void beat();
    // A follower's part of a Read step: its ranks' heads of the image.
    void follow_read(const Step & step);

    ProcessGroup & processes_;
    std::unique_ptr<RankGroup> local_;
    std::vector<ShardRange> vocab_;                  // per process
    std::vector<std::vector<ShardRange>> kv_heads_;  // per process, per layer
    std::function<KvImageLayout(int32_t)> image_layout_;
    int32_t n_vocab_;
    int n_local_;
    int n_ranks_;
    // One step at a time on the control messages: the driving thread's or
    // the heartbeat's.
    std::mutex step_mutex_;
    std::chrono::steady_clock::time_point last_step_;  // under step_mutex_
    std::mutex beat_mutex_;
    std::condition_variable beat_cv_;
    bool beat_stop_ = false;  // under beat_mutex_
    std::thread beat_thread_;
    mutable std::mutex failure_mutex_;
    std::string failure_;      // a step that failed here (control messages or this process's ranks)
    std::vector<float> rows_;  // this process's logits, full rows
    std::vector<RankReport> reports_;
    mutable std::mutex stats_mutex_;
    std::vector<CollectiveStats> stats_;
};

}  // namespace llama_tp
