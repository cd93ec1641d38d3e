#pragma once
// How a rank's slices of a model's tensors are declared: the slices its
// shard takes (rows, columns, parts of a fused matrix), row-parallel
// matrices cell by cell, and the tensors themselves, read later from the
// file. ModelWeights declares the model's own tensors with it; each block
// kind declares its layers' (runtime/blocks/).

#include "runtime/model/weights.h"
#include "runtime/shard/shard_plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llama_tp {

struct WeightDeclarer {
    ModelWeights & weights;
    const GgufFile & file;
    const HParams & hp;
    const WeightsLoad & load;

    // What the rank holds (ShardPlan), and of layer il.
    const RankShard & shard() const { return *load.shard; }
    const LayerShard & layer(int il) const { return load.shard->layers[il]; }

    // The rows or columns a range of units (heads, FFN columns) covers.
    static TensorSlice rows(const ShardRange & r, int64_t unit) {
        return TensorSlice{TensorSlice::Rows, r.begin * unit, r.end * unit};
    }
    static TensorSlice cols(const ShardRange & r, int64_t unit) {
        return TensorSlice{TensorSlice::Columns, r.begin * unit, r.end * unit};
    }
    static TensorSlice planes(const ShardRange & r) { return TensorSlice{TensorSlice::Planes, r.begin, r.end}; }
    // Rows of one part of a fused matrix (that part, or its slice) from row offset on.
    static TensorSlice part(const TensorSlice & s, int64_t offset, int64_t size) {
        return s.axis == TensorSlice::Whole ? TensorSlice{TensorSlice::Rows, offset, offset + size}
                                            : TensorSlice{TensorSlice::Rows, offset + s.begin, offset + s.end};
    }

    // A tensor of the file, its slice (a slice of all of it is the whole).
    ggml_tensor * declare(const std::string & name, std::vector<int64_t> shape, bool matrix, TensorSlice slice = {},
                          bool required = true);
    // A matrix of row ranges of one file matrix, stacked in order (ModelWeights::declare_rows).
    ggml_tensor * declare_rows(const std::string & name, const std::vector<int64_t> & shape,
                               const std::vector<TensorSlice> & parts, bool matrix = true);
    // Column ranges of one file tensor side by side (ModelWeights::declare_cols).
    ggml_tensor * declare_cols(const std::string & name, const std::vector<int64_t> & shape,
                               const std::vector<TensorSlice> & parts, bool matrix);
    // With split-invariant sums a row-parallel matrix is multiplied in one
    // pass over its cells where ggml-ext has a kernel for its type (then it
    // keeps ggml's plain layout), else one product per cell, each cell a
    // tensor of its own that ggml's kernels take as they take any matrix.
    // cells: the rank's pieces, in units of `unit` columns, in the order its
    // input holds them (not necessarily adjacent in the file).
    // all_cells: the matrix's cells on all ranks; one pass only where one
    // product takes all of them, so that every split multiplies alike.
    RowParallelWeight row_parallel(const std::string & name, const std::vector<int64_t> & shape,
                                   const std::vector<ShardRange> & cells, int64_t unit, bool experts,
                                   size_t all_cells = 0);
};

// Each block kind's weights of layer il, declared into l.
void declare_attention_weights(WeightDeclarer & d, int il, LayerWeights & l);  // runtime/blocks/attention.cpp
void declare_ffn_weights(WeightDeclarer & d, int il, LayerWeights & l);        // runtime/blocks/ffn.cpp
void declare_delta_net_weights(WeightDeclarer & d, int il, LayerWeights & l);  // runtime/blocks/delta_net.cpp
void declare_latent_attention_weights(WeightDeclarer & d, int il,
                                      LayerWeights & l);  // runtime/blocks/latent_attention.cpp

}  // namespace llama_tp
