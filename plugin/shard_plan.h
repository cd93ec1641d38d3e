#pragma once
// How a model's matrices are divided among tensor-parallel ranks
// (Megatron-style): attention by heads, the FFN by its width, the output
// head by vocabulary. Norms and token embeddings are mirrored.

#include "ggml-ext/shard_range.h"
#include "plugin/hparams.h"

#include <string>
#include <vector>

namespace llama_tp {

class GgufFile;

struct RankShard {
    ShardRange q_heads;   // query heads of this rank
    ShardRange kv_heads;  // the KV heads those query heads read (replicated when n_head_kv < ranks)
    ShardRange ff;        // FFN width (rows of gate/up, columns of down)
    ShardRange vocab;     // rows of the output head
};

struct ShardPlan {
    int n_ranks = 1;
    std::vector<RankShard> ranks;

    // Throws llama_tp::Error saying which tensor cannot take the split and
    // what would work.
    static ShardPlan plan(const GgufFile & file, const HParams & hp, int n_ranks, const std::vector<float> & weights);
    std::string describe() const;
};

}  // namespace llama_tp
