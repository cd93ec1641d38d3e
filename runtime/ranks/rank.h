#pragma once
// One tensor-parallel rank: its shard of the weights, its slice of the KV
// cache, its backend and thread pool, and its cached graph. Every rank builds
// the same graph shape over its own shard; collective nodes join them.

#include "runtime/kv/kv_image.h"
#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/exec/segment_executor.h"
#include "runtime/batch.h"
#include "runtime/model/hparams.h"
#include "runtime/plan/rank_ops.h"
#include "runtime/kv/kv_cache.h"
#include "runtime/graph/decoder_graph.h"
#include "runtime/engine_options.h"
#include "runtime/ranks/collective_stats.h"
#include "runtime/ranks/step.h"
#include "runtime/model/weights.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "ggml-cpu.h"

namespace llama_tp {

class ControlVector;
class GgufFile;
struct RankShard;

struct RankConfig {
    int rank = 0;
    int n_ranks = 1;
    ggml_backend_dev_t device = nullptr;                   // the backend device the rank runs on
    RankOps ops = RankOps::Host;                           // the operations its graph and weights may use (RuntimePlan)
    CollectivePath collectives = CollectivePath::InGraph;  // how its sums meet the others' (RuntimePlan)
    const RankShard * shard = nullptr;                     // its share of the model (ShardPlan); required
    bool split_invariant = false;                          // the shard's pieces are summed exactly (ShardPlan)
    bool one_pass_products = false;                        // EngineOptions::one_pass_products
    AllReduceEngine * allreduce = nullptr;
    int32_t n_threads = 1;
    bool threads_poll = true;  // the CPU pool's threads poll between graphs (alone on its cores)
    KvPoolSizes kv_sizes;
    KvTypes kv_types;
    bool embeddings = false;   // outputs are hidden states (n_embd), not logits
    bool keep_hidden = false;  // and every token's final-normed hidden state (hidden_rows(), rank 0)
    bool progress = false;
    bool check_tensors = false;               // every value read is checked (WeightsLoad::check_data)
    std::vector<const GgufFile *> adapters;   // LoRA adapter files, open for the load
    const ControlVector * control = nullptr;  // added to the layers' outputs (nullptr: none)
};

class Rank {
  public:
    Rank(const GgufFile & file, const HParams & hp, const RankConfig & config);
    ~Rank();
    Rank(const Rank &) = delete;
    Rank & operator=(const Rank &) = delete;

    // Applies a step to this rank's KV slice and runs it; copies this rank's
    // vocabulary slice of every output row into logits (output_rows() rows of
    // n_vocab floats). Throws llama_tp::Error when the step fails; the cache
    // then holds none of the batch's tokens (its removals stay applied).
    // With embeddings, rows of n_embd floats instead, written by rank 0 alone
    // (every rank holds the same).
    void run(const Step & step, float * logits, int32_t n_vocab);
    // A Read step: applies its removals and copies this rank's heads of the
    // sequence's cells into image (a KvImageLayout image of step.read_n cells).
    // Throws llama_tp::Error when a position is not cached.
    void read(const Step & step, uint8_t * image);

    // With keep_hidden, on rank 0: the last step's final-normed hidden
    // states, n_embd floats per batch row.
    const std::vector<float> & hidden_rows() const { return hidden_rows_; }
    int64_t graph_builds() const { return graph_builds_; }
    uint64_t weight_bytes() const { return weights_->total_bytes(); }
    int64_t n_params() const { return weights_->n_params(); }
    // Weights, KV cache and compute buffer of this rank.
    uint64_t memory_bytes() const;
    CollectiveStats collective_stats() const {
        return {collective_calls_.load(), (double) collective_ns_.load() * 1e-9};
    }

  private:
    // Builds (or reuses) the graph for this shape and fills its inputs.
    void prepare(const Batch & batch, const KvPlacement & placement, const std::vector<int32_t> & out_rows,
                 const GraphShape & shape);
    void fill_masks(const Batch & batch, const GraphShape & shape);
    void fill_lora_scales(const Batch & batch);
    static void set_input(ggml_tensor * t, const void * data, size_t bytes);
    void compute();
    void copy_logits(float * logits, int32_t n_vocab) const;
    KvPlacement place(const Step & step);
    // A step's KV edits: removals, shifts whose keys are rotated, copies,
    // states saved and restored.
    void apply_edits(const std::vector<KvEdit> & edits);
    void copy_state_row(std::pair<int32_t, int32_t> rows);
    void copy_cells(const KvCopy & copied);
    void rotate_keys(const KvShifted & cells, int32_t delta);
    // A Load step's image into the cells the batch was placed in.
    void load(const Step & step, const KvPlacement & placement);
    // Copies this rank's heads between the cache and an image, either way:
    // cells for the layers of the full pool, window_cells for the window pool's.
    void copy_heads(const std::vector<int64_t> & cells, const std::vector<int64_t> & window_cells, uint8_t * image,
                    bool to_image);
    // The same for the linear-attention states of sequence seq.
    void copy_states(const KvImageLayout & layout, int32_t seq, uint8_t * image, bool to_image);
    // Zeros for the states of the sequences a step starts.
    void clear_new_states(const StatePlacement & states);

    static void allreduce_callback(void * user, void * data, ggml_type type, size_t n, void * stream);
    template <typename T>
    void timed_allreduce(T * data, size_t n, void * stream);

    const HParams & hp_;
    RankConfig config_;
    int64_t vocab_begin_ = 0;
    std::unique_ptr<ModelWeights> weights_;
    ggml_backend_ptr backend_;
    ggml_threadpool_t threadpool_ = nullptr;
    std::unique_ptr<KvCache> kv_;
    ggml_gallocr_ptr allocator_;
    std::unique_ptr<SegmentExecutor> executor_;
    bool said_replay_ = false;

    ggml_context_ptr graph_ctx_;
    ggml_cgraph * graph_ = nullptr;
    GraphShape shape_;
    GraphInputs inputs_;
    ggml_tensor * logits_ = nullptr;
    ggml_tensor * hidden_ = nullptr;
    std::vector<float> hidden_rows_;
    std::vector<ggml_fp16_t> mask_;
    std::vector<ggml_fp16_t> mask_swa_;  // sliding-window layers' (HParams::n_swa > 0)
    int64_t graph_builds_ = 0;
    // Written by the rank's compute thread, read by anyone (metrics).
    std::atomic<int64_t> collective_calls_{0};
    std::atomic<int64_t> collective_ns_{0};
};

}  // namespace llama_tp
