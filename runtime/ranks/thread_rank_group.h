#pragma once
// Ranks as threads of this process: one persistent thread per rank (rank 0's
// on the caller's), each with its own shard, KV slice and thread pool. Also
// the ranks of one process inside a group of processes (MpiRankGroup), where
// they are the global ranks [first_rank, first_rank + n_local).

#include "ggml-ext/comm/allreduce_engine.h"
#include "runtime/kv/kv_pools.h"
#include "runtime/plan/rank_ops.h"
#include "runtime/ranks/rank_group.h"

#include <memory>
#include <vector>

#include "ggml-backend.h"

namespace llama_tp {

class ControlVector;
class GgufFile;
class Rank;
class RankThreads;
struct HParams;
struct ShardPlan;

struct RankSetup {
    const GgufFile * file = nullptr;
    const HParams * hp = nullptr;
    const ShardPlan * plan = nullptr;  // every rank's share, one rank's the whole model
    const EngineOptions * options = nullptr;
    KvPoolSizes kv_sizes;  // of every rank's cache
    int first_rank = 0;
    int n_local = 1;                                       // ranks in this process
    int n_ranks = 1;                                       // ranks in the whole group
    int32_t n_threads = 1;                                 // compute threads per rank
    std::vector<ggml_backend_dev_t> devices;               // one per local rank
    RankOps ops = RankOps::Host;                           // RuntimePlan::ops
    CollectivePath collectives = CollectivePath::InGraph;  // RuntimePlan::collectives
    std::vector<const GgufFile *> adapters;                // LoRA adapter files, open for the load
    const ControlVector * control = nullptr;               // nullptr: none
};

class ThreadRankGroup final : public RankGroup {
  public:
    // Loads every local rank's shard in parallel. allreduce joins the ranks
    // (nullptr with a single rank in the whole group).
    ThreadRankGroup(const RankSetup & setup, std::unique_ptr<AllReduceEngine> allreduce);
    ~ThreadRankGroup() override;

    int n_ranks() const override { return (int) ranks_.size(); }
    // logits: full rows; each local rank writes its vocabulary slice.
    void run(const Step & step, float * logits) override;
    // One rank after the other, on the caller's thread (no collectives).
    void read(const Step & step, uint8_t * image) override;
    std::vector<RankReport> reports() const override;
    const std::vector<float> & hidden_rows() const override;
    std::vector<CollectiveStats> collective_stats() const override;
    int64_t graph_builds() const override;
    std::string allreduce_name() const override;
    bool allreduce_rounds_to_bf16() const override { return allreduce_ && allreduce_->rounds_to_bf16(); }
    std::string failure() const override;
    void abort(const std::string & why) override;

  private:
    int32_t n_vocab_;  // floats per output row: the vocabulary, or n_embd with embeddings
    int first_rank_;
    std::unique_ptr<AllReduceEngine> allreduce_;
    std::vector<std::unique_ptr<Rank>> ranks_;
    std::unique_ptr<RankThreads> threads_;
};

}  // namespace llama_tp
