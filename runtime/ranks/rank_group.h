#pragma once
// The ranks of a tensor-parallel group, driven by rank 0: run() hands one
// step to every rank and returns the logits assembled from every rank's
// vocabulary slice. Ranks talk only through the group (steps, logits) and
// the AllReduce engine inside their graphs, so the ranks may be threads of
// this process (ThreadRankGroup) or processes launched by MPI (MpiRankGroup).

#include "runtime/engine_options.h"
#include "runtime/ranks/collective_stats.h"
#include "runtime/ranks/step.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llama_tp {

// What one rank holds, for logs, /metrics and ModelInfo.
struct RankReport {
    uint64_t memory_bytes = 0;  // weights, KV cache and compute buffer
    uint64_t weight_bytes = 0;
    int64_t n_params = 0;
};

class RankGroup {
  public:
    virtual ~RankGroup() = default;
    virtual int n_ranks() const = 0;

    // Runs the step on every rank; logits receives output_rows(step.batch)
    // rows of n_vocab floats. Throws llama_tp::Error naming what failed; a
    // group whose collectives failed stays failed.
    virtual void run(const Step & step, float * logits) = 0;
    // Runs a Read step: every rank copies its heads of the sequence's cells
    // into image (KvImageLayout, step.read_n cells). Throws llama_tp::Error.
    virtual void read(const Step & step, uint8_t * image) = 0;

    // EngineOptions::keep_hidden: the last step's final-normed hidden
    // states, n_embd floats per batch row (rank 0's; every rank's are the same).
    virtual const std::vector<float> & hidden_rows() const = 0;

    virtual std::vector<RankReport> reports() const = 0;
    // Per rank, as of the last step that returned (safe from any thread).
    virtual std::vector<CollectiveStats> collective_stats() const = 0;
    virtual int64_t graph_builds() const = 0;  // rank 0's
    virtual std::string allreduce_name() const = 0;
    virtual bool allreduce_rounds_to_bf16() const = 0;  // AllReduceEngine::rounds_to_bf16

    // Why the group failed for good ("" while it works); safe from any thread.
    virtual std::string failure() const = 0;
    // Fails the group from outside (see Engine::abort).
    virtual void abort(const std::string & why) = 0;
};

}  // namespace llama_tp
