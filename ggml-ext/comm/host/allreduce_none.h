#pragma once
// The none engine: a group of one rank, whose values already are the sum.

#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/comm/allreduce_failure.h"

namespace llama_tp {

class NoneAllReduce final : public AllReduceWithGroupFailure {
  public:
    // Throws llama_tp::Error unless config.n_ranks is 1.
    explicit NoneAllReduce(const AllReduceConfig & config);

    const char * name() const override { return "none"; }
    std::string joins() const override { return "1 rank, nothing to reduce"; }
    bool rounds_to_bf16() const override { return false; }
    int n_ranks() const override { return 1; }
    void allreduce(int rank, float *, size_t) override { check_rank(rank); }
    void allreduce(int rank, double *, size_t) override { check_rank(rank); }

  private:
    void check_rank(int rank);
};

}  // namespace llama_tp
