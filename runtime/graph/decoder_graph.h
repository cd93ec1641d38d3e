#pragma once
// The forward graph of a decoder-only transformer for one batch shape, over
// one rank's shard: the embeddings, every layer's blocks (runtime/blocks/:
// attention, then the FFN, each with its residual), the final norm and the
// head. Partial sums meet in collective nodes: one after the attention
// output projection, one after the FFN (for experts after all routed
// experts are summed).

#include "runtime/kv/kv_cache.h"
#include "runtime/plan/rank_ops.h"

#include <cstdint>
#include <vector>

#include "ggml-ext/ops/collective.h"

struct ggml_context;
struct ggml_cgraph;
struct ggml_tensor;

namespace llama_tp {

struct HParams;
class ModelWeights;

// How a rank's partial sums are combined: a collective node calling fn
// (F32 values, or F64 ones for split-invariant sums).
struct Collective {
    ggml_cluster_allreduce_fn fn;
    void * user;
};

// The shape a graph is built for; equal shapes reuse one graph.
struct GraphShape {
    int32_t n_tokens = 0;
    int32_t n_outputs = 0;
    std::vector<AttentionRun> runs;         // cover the tokens in order
    std::vector<AttentionRun> window_runs;  // the same over the window pool (empty: none)
    uint64_t lora_active = 0;               // bit i: adapter i changes some token of the batch
    std::vector<StateRun> state_runs;       // linear attention's (empty: none), cover the tokens in order
    bool operator==(const GraphShape & o) const {
        return n_tokens == o.n_tokens && n_outputs == o.n_outputs && runs == o.runs && window_runs == o.window_runs &&
               lora_active == o.lora_active && state_runs == o.state_runs;
    }
    // The runs of sliding-window layers.
    const std::vector<AttentionRun> & swa_runs() const { return window_runs.empty() ? runs : window_runs; }
    // Mask elements of all runs together.
    static size_t mask_size(const std::vector<AttentionRun> & runs) {
        size_t n = 0;
        for (const AttentionRun & r : runs) n += (size_t) r.window * r.size();
        return n;
    }
};

// Tensors the caller fills before each compute.
struct GraphInputs {
    ggml_tensor * tokens = nullptr;        // I32 [n_tokens] (single rank)
    ggml_tensor * positions = nullptr;     // I32 [n_tokens]
    ggml_tensor * kv_cells = nullptr;      // I64 [n_tokens]: cache row each token is written to
    ggml_tensor * kv_cells_swa = nullptr;  // the same in the window pool (if there is one)
    ggml_tensor * kq_mask = nullptr;       // F16: each run's [window, n_tokens] in turn
    ggml_tensor * kq_mask_swa = nullptr;   // the same for sliding-window layers (HParams::n_swa > 0)
    ggml_tensor * out_rows = nullptr;      // I32 [n_outputs]: batch rows whose logits are wanted
    // Tensor parallel only: each token's row in this rank's embedding slice
    // (0 when outside it) and 1/0 for inside/outside.
    ggml_tensor * embd_rows = nullptr;  // I32 [n_tokens]
    ggml_tensor * embd_mask = nullptr;  // F32 [1, n_tokens]
    // F32 [1, n_tokens] per ModelWeights::lora_scales entry: each token's
    // scale of that adapter's pairs of that rank.
    std::vector<ggml_tensor *> lora_scales;
    // Linear attention: each state run's sequences' state rows (I32).
    ggml_tensor * state_rows = nullptr;
    // A multi-token-prediction head's (HParams::mtp_head): F32 [n_embd,
    // n_tokens], each token's hidden state of the position before it.
    ggml_tensor * hidden = nullptr;
};

// Cells of one pool to rotate (I32 [n]) and by how many positions (I32 [n]);
// null: none.
struct KeyShift {
    ggml_tensor * cells = nullptr;
    ggml_tensor * shift = nullptr;
};

// Adds to gf the rotation of the keys of every layer in its pool's cells, in
// place in the cache: a context shift moves those cells' positions, and RoPE
// composes, so the keys become those of the new positions up to rounding.
// Each layer rotates as its forward pass does.
void build_key_shift_graph(ggml_context * ctx, ggml_cgraph * gf, const HParams & hp, const ModelWeights & w,
                           const KvCache & kv, KeyShift all, KeyShift window);

// What a rank's graph computes and with which operations.
struct GraphMode {
    const Collective * reduce = nullptr;  // nullptr: a single rank
    // Row-parallel products are summed piece by piece in double (ShardPlan),
    // so the logits do not depend on the split.
    bool split_invariant = false;
    bool embeddings = false;  // outputs are the final-normed hidden states
    // Besides the logits, every token's final-normed hidden state (what a
    // multi-token-prediction head reads).
    bool keep_hidden = false;
    // With RankOps::Host ggml-ext's row attention may be used; other
    // backends' graphs take ggml's operations only.
    RankOps ops = RankOps::Host;
};

// What a graph outputs: the logits [vocabulary slice, n_outputs], or with
// embeddings the final-normed hidden states [n_embd, n_outputs] (the same on
// every rank); with keep_hidden those of every token [n_embd, n_tokens].
struct GraphOutputs {
    ggml_tensor * logits = nullptr;
    ggml_tensor * hidden = nullptr;
};

// Adds the forward pass over this rank's shard to gf.
GraphOutputs build_decoder_graph(ggml_context * ctx, ggml_cgraph * gf, const HParams & hp, const ModelWeights & w,
                                 const KvCache & kv, const GraphShape & shape, GraphInputs & in,
                                 const GraphMode & mode);

}  // namespace llama_tp
