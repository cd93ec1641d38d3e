#pragma once
// How a model's matrices are divided among tensor-parallel ranks
// (Megatron-style): attention by heads, the FFN by its width, the output
// head and the token embeddings by vocabulary. Norms are mirrored. Each
// block kind says which axes it has (runtime/shard/axis.h); this plan splits
// them all alike and is the one place a rank's share is decided.

#include "ggml-ext/shard_range.h"
#include "runtime/model/hparams.h"

#include <string>
#include <vector>

namespace llama_tp {

class GgufFile;

// One FFN's share of a rank: its width, and with split-invariant sums the
// cells of the reduction grid it holds (one piece, the whole range, without).
struct FfnShard {
    ShardRange width;                // rows of gate/up, columns of down
    std::vector<ShardRange> pieces;  // in FFN columns, covering width
};

// What a rank holds of one layer.
struct LayerShard {
    ShardRange kv_heads;  // the KV heads its query heads read (replicated when the layer's n_head_kv < ranks)
    FfnShard ff;          // the dense FFN (empty where the layer has experts only)
    FfnShard ff_exp;      // every expert's width (each rank holds every expert; empty without experts)
};

struct RankShard {
    ShardRange q_heads;  // query heads of this rank, in every layer
    ShardRange vocab;    // rows of the output head
    // attn_output in pieces of query heads whose products are summed
    // separately: the rank's whole range, or with split-invariant sums the
    // cells of the reduction grid it holds.
    std::vector<ShardRange> o_pieces;
    // Linear attention (HParams::delta): the key heads of this rank, in
    // every such layer (their value heads go with them), and ssm_out's cells
    // in key heads as o_pieces are in query heads.
    ShardRange delta_heads;
    std::vector<ShardRange> delta_pieces;
    size_t delta_cells = 0;  // ssm_out's cells on all ranks together (each rank computes them alike)
    std::vector<LayerShard> layers;

    // The most pieces of row-parallel matrices a layer has.
    size_t max_pieces() const;
    // The KV heads of the first layer that keeps some (for logs; linear
    // attention keeps none).
    ShardRange first_kv_heads() const;
};

struct ShardPlan {
    int n_ranks = 1;
    std::vector<RankShard> ranks;

    // Throws llama_tp::Error saying which tensor cannot take the split and
    // what would work.
    //
    // split_invariant: results must not depend on the split. The attention
    // heads and the FFN width are cut at a reduction grid that depends on the
    // model only: the union of the boundaries of its even splits into 2, 3, 4
    // and 8 ranks. Every rank's boundaries are moved to the nearest grid
    // boundary, and every grid cell's products are summed on their own and
    // then added exactly (ggml-ext/ops/exact_sum.h), so any split on the grid,
    // one device included, adds up the same products to the same sums.
    static ShardPlan plan(const GgufFile & file, const HParams & hp, int n_ranks, const std::vector<float> & weights,
                          bool split_invariant = false);
    std::string describe() const;
    // Whether ggml's kernels compute each rank's slice of every matrix as
    // they compute the whole: every boundary between ranks a multiple of
    // kRowTile rows, and the head's slices (which may end anywhere) of a
    // multiple of 4 rows exactly where the whole vocabulary is.
    bool tiled(const HParams & hp) const;
    static constexpr int64_t kRowTile = 16;
};

}  // namespace llama_tp
