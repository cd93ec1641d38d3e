#pragma once
// A model's weights, loaded from a GGUF file straight into ggml backend
// buffers. Matrix weights go to the CPU backend's repacking buffer type where
// it takes them (faster kernels for some quantizations), the rest to plain
// host memory.

#include "runtime/model/hparams.h"
#include "runtime/plan/rank_ops.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpp.h"

struct ggml_context;
struct ggml_tensor;

namespace llama_tp {

class ControlVector;
class GgufFile;
struct RankShard;

// Which part of a file tensor a rank holds: all of it, a range of its rows
// (ne[1]), or a range of its columns (ne[0]) in every row.
struct TensorSlice {
    // Planes: a range of a 3-D tensor's matrices (its ne[2]).
    enum Axis { Whole, Rows, Columns, Planes } axis = Whole;
    int64_t begin = 0;
    int64_t end = 0;
};

// A row-parallel matrix (attn_output, ffn_down): the rank's columns in one
// tensor; with split-invariant sums, unless one_pass, one tensor per cell of
// the reduction grid (RankShard::o_pieces, FfnShard::pieces).
struct RowParallelWeight {
    std::vector<ggml_tensor *> pieces;
    bool one_pass = false;  // split-invariant, every cell in one ggml_ext_exact_matmul
    // The cells as column offsets in this rank's columns: 0 first, the
    // width last (without split-invariant sums one cell, or one per file
    // range of the rank's columns where those are apart: linear attention's
    // ssm_out).
    std::vector<int64_t> cell_bounds;
    // Whether the rank's first piece is the matrix's first cell: what every
    // rank holds alike and must count once (a bias, a LoRA pair's change)
    // goes with it.
    bool first = true;
};

// One matrix's LoRA pair: y += scale * B (A x). A is split as the matrix's
// input is (row-parallel: the rank's columns, cell by cell of the reduction
// grid, so A x is summed across ranks as x @ W is), B as its output
// (column-parallel: the rank's rows); the other one is whole on every rank.
struct LoraWeight {
    RowParallelWeight a;  // a column-parallel matrix's: one whole piece
    ggml_tensor * b = nullptr;
    int scale = 0;  // index of its per-token scale input (ModelWeights::lora_scales)
};

// A LoRA adapter file's matrices, by the base matrix they change (its first
// piece for a row-parallel matrix).
struct LoraAdapter {
    float alpha = 0.0f;  // adapter.lora.alpha; 0: the scale is used as given
    std::map<const ggml_tensor *, LoraWeight> weights;
};

// A per-token scale input of the graph: one adapter at one rank (B's rows),
// filled with (user scale * alpha) / rank as upstream computes a scale.
struct LoraScale {
    int adapter = 0;
    int64_t rank = 0;
};

struct LayerWeights {
    ggml_tensor * attn_norm = nullptr;
    ggml_tensor * wq = nullptr;
    ggml_tensor * wk = nullptr;
    ggml_tensor * wv = nullptr;    // gemma4: nullptr where values are the keys' projection (or none are stored)
    ggml_tensor * wqkv = nullptr;  // phi3: the rank's Q, K and V rows stacked, instead of wq, wk, wv
    RowParallelWeight wo;
    ggml_tensor * bo = nullptr;          // gpt-oss: attn_output's bias, mirrored, added after the sum
    ggml_tensor * attn_sinks = nullptr;  // gpt-oss: one logit per query head of the rank
    ggml_tensor * bq = nullptr;          // qwen2
    ggml_tensor * bk = nullptr;
    ggml_tensor * bv = nullptr;
    ggml_tensor * q_norm = nullptr;  // qwen3: per-head RMS norm of queries and keys
    ggml_tensor * k_norm = nullptr;
    ggml_tensor * attn_post_norm = nullptr;  // gemma3: on the attention's output
    // Latent attention (deepseek2): the queries' low-rank pair (wq_a and its
    // norm mirrored, wq_b the rank's heads' rows; wq where there is none),
    // the latent and its RoPE part (wkv_a) with the latent's norm, mirrored,
    // and per head the latent's expansion to keys and values (the rank's
    // heads of attn_k_b and attn_v_b).
    ggml_tensor * wq_a = nullptr;
    ggml_tensor * q_a_norm = nullptr;
    ggml_tensor * wq_b = nullptr;
    ggml_tensor * wkv_a = nullptr;
    ggml_tensor * kv_a_norm = nullptr;
    ggml_tensor * wk_b = nullptr;
    ggml_tensor * wv_b = nullptr;
    ggml_tensor * wkv_b = nullptr;  // the expanded form's (older files): each head's key rows, then its value rows
    ggml_tensor * ffn_norm = nullptr;
    ggml_tensor * ffn_post_norm = nullptr;  // gemma3: on the FFN's output
    ggml_tensor * ffn_gate = nullptr;
    ggml_tensor * ffn_up = nullptr;
    ggml_tensor * ffn_gate_up = nullptr;  // phi3: the rank's gate rows, then its up rows, instead of the two
    RowParallelWeight ffn_down;
    ggml_tensor * ffn_router = nullptr;       // MoE: [n_embd, n_expert], mirrored
    ggml_tensor * ffn_exp_probs_b = nullptr;  // the router's selection bias [n_expert], mirrored
    ggml_tensor * ffn_gate_exps = nullptr;
    ggml_tensor * ffn_up_exps = nullptr;
    RowParallelWeight ffn_down_exps;
    // gpt-oss: the router's bias (mirrored), the experts' gate and up biases
    // (the rank's width) and down bias, which only the rank holding the first
    // cell of the FFN width adds (nullptr elsewhere), so that it counts once.
    ggml_tensor * ffn_router_b = nullptr;
    ggml_tensor * ffn_gate_exps_b = nullptr;
    ggml_tensor * ffn_up_exps_b = nullptr;
    ggml_tensor * ffn_down_exps_b = nullptr;
    // gemma4's expert layers: the router's input scale, the experts' gate
    // and up fused (the rank's gate rows, then its up rows, per expert), a
    // scale per expert on the down projection, and norms around the dense
    // FFN's output (post_ffw_norm_1) and the experts' input and output.
    ggml_tensor * ffn_router_scale = nullptr;
    ggml_tensor * ffn_gate_up_exps = nullptr;
    ggml_tensor * ffn_down_exps_scale = nullptr;
    ggml_tensor * ffn_post_norm_1 = nullptr;
    ggml_tensor * ffn_pre_norm_2 = nullptr;
    ggml_tensor * ffn_post_norm_2 = nullptr;
    ggml_tensor * ffn_shared_gate = nullptr;  // qwen35moe: the shared expert's gate [n_embd], mirrored
    // gemma4: the per-layer embedding's gate and projection (mirrored), its
    // norm, and a scale on the layer's output.
    ggml_tensor * per_layer_gate = nullptr;
    ggml_tensor * per_layer_proj = nullptr;
    ggml_tensor * per_layer_norm = nullptr;
    ggml_tensor * out_scale = nullptr;
    ggml_tensor * control = nullptr;  // a control vector's direction, added to the layer's output
    // Linear attention (runtime/blocks/delta_net.cpp), the rank's key heads
    // and the value heads that read them: the convolution's input (q, k and
    // v channels), the output gate (or both as ssm_qkvz), the decay's
    // projection (or it and the update strength's as ssm_ba), bias and rate,
    // the update strength, the convolution's taps, the per-head norm and the
    // output projection.
    ggml_tensor * ssm_qkv = nullptr;
    ggml_tensor * ssm_gate = nullptr;
    ggml_tensor * ssm_qkvz = nullptr;
    ggml_tensor * ssm_alpha = nullptr;
    ggml_tensor * ssm_ba = nullptr;
    ggml_tensor * ssm_dt = nullptr;
    ggml_tensor * ssm_a = nullptr;
    ggml_tensor * ssm_beta = nullptr;
    ggml_tensor * ssm_conv = nullptr;
    ggml_tensor * ssm_norm = nullptr;
    RowParallelWeight ssm_out;
};

// How one rank's weights are read.
struct WeightsLoad {
    const RankShard * shard = nullptr;  // the rank's share (ShardPlan; one rank's is the whole model); required
    // The row-parallel matrices are multiplied cell by cell (ShardPlan, RowParallelWeight).
    bool split_invariant = false;
    // With ggml-ext's host operations, split-invariant sums multiply q8_0
    // row-parallel matrices in one pass; elsewhere every cell is a tensor of
    // its own, multiplied by ggml's kernels.
    RankOps ops = RankOps::Host;
    // The other matrices ggml_ext_exact_matmul takes are multiplied by it too
    // (EngineOptions::one_pass_products): they keep ggml's plain layout.
    bool one_pass_products = false;
    ggml_backend_dev_t device = nullptr;
    bool progress = false;  // a progress line on stderr for large files
    // Every value read is checked (NaN, infinity, a bad block scale), as
    // upstream's --check-tensors does.
    bool check_data = false;
    // LoRA adapter files, each matrix split as its base matrix is; a tensor
    // that changes no matrix llama-tp applies LoRA to is an error naming it.
    std::vector<const GgufFile *> adapters;
};

class ModelWeights {
  public:
    // Loads one rank's shard of the model; a rank reads only the
    // bytes of its own slices. Throws llama_tp::Error naming the file and
    // tensor when a tensor is missing, has the wrong shape, cannot be read
    // or (check_data) holds invalid values.
    ModelWeights(const GgufFile & file, const HParams & hp, const WeightsLoad & load);
    ModelWeights(const ModelWeights &) = delete;
    ModelWeights & operator=(const ModelWeights &) = delete;

    ggml_tensor * tok_embd = nullptr;
    ggml_tensor * output_norm = nullptr;
    ggml_tensor * output = nullptr;  // token_embd when the head is tied
    ggml_tensor * rope_freqs = nullptr;
    ggml_tensor * rope_long = nullptr;   // LongRoPE (phi3): factors beyond the original context
    ggml_tensor * rope_short = nullptr;  // and within it
    // gemma4 (E2B, E4B): per-layer token embeddings, split by vocabulary as
    // token_embd is, and the projection of the hidden state added to them.
    ggml_tensor * per_layer_tok_embd = nullptr;
    ggml_tensor * per_layer_model_proj = nullptr;
    ggml_tensor * per_layer_proj_norm = nullptr;
    // The multi-token-prediction head (HParams::mtp_head), mirrored: the
    // projection of the normed token embedding and hidden state side by
    // side, and those two norms. Its own embedding, final norm and output
    // head (nextn.embed_tokens, shared_head_norm, shared_head_head) stand
    // in tok_embd, output_norm and output where the file has them.
    ggml_tensor * mtp_eh_proj = nullptr;
    ggml_tensor * mtp_enorm = nullptr;
    ggml_tensor * mtp_hnorm = nullptr;
    std::vector<LayerWeights> layers;
    std::vector<LoraAdapter> loras;  // in the order given
    std::vector<LoraScale> lora_scales;

    // The LoRA pair of adapter i for a base matrix (a row-parallel one's
    // first piece); nullptr where the adapter leaves it alone.
    const LoraWeight * lora(size_t i, const ggml_tensor * base) const;

    // Whether split-invariant sums multiply every row-parallel matrix of the
    // model in one pass (RowParallelWeight::one_pass) at no cost: dense
    // layers whose attn_output and ffn_down ggml_ext_exact_matmul takes, and
    // multiplies faster than ggml where they are K-quants. Linear
    // attention's ssm_out counts where that kernel takes its type: it has
    // more cells than one pass takes, so it is one product per cell, which
    // measured no slower on the whole (docs/benchmarks.md, "Linear
    // attention").
    static bool row_parallel_in_one_pass(const GgufFile & file, const HParams & hp);

    // The types of the file's plain matrices that ggml_ext_exact_matmul
    // takes, each once, in the order first met.
    static std::vector<ggml_type> one_pass_types(const GgufFile & file);

    // RoPE's frequency factors (nullptr: none) for a cache of n_ctx_seq cells
    // per sequence: rope_freqs, or LongRoPE's long factors where a sequence
    // may outgrow the original context, else its short ones, decided as
    // upstream decides it (n_ctx_seq rounded up to 256 cells).
    ggml_tensor * rope_factors(int32_t n_ctx_seq, const HParams & hp) const;

    // Whether a matrix that needs no exact sums is multiplied by
    // ggml_ext_exact_matmul, in one cell (WeightsLoad::one_pass_products).
    bool one_pass_product(const ggml_tensor * weight) const;

    // Adds a control vector's directions (whole on every rank) to the layers it changes.
    void add_control_vector(const ControlVector & cv);

    uint64_t total_bytes() const;
    int64_t n_params() const { return n_params_; }
    // What these weights are of the model: their heads, widths and vocabulary.
    const RankShard & shard() const { return *shard_; }

  private:
    friend struct WeightDeclarer;  // the blocks declare their layers' tensors through it
    // What a tensor is read from: slices of file tensors, one after another.
    struct Part {
        std::string name;  // tensor in the file
        TensorSlice slice;
        const GgufFile * file = nullptr;  // the file it is read from (during construction)
    };
    const ggml_tensor * find_checked(const GgufFile & file, const std::string & name,
                                     const std::vector<int64_t> & shape, bool required) const;
    ggml_tensor * declare(const GgufFile & file, const std::string & name, std::vector<int64_t> shape, bool matrix,
                          TensorSlice slice = {}, bool required = true);
    // A matrix of row ranges of one file matrix, stacked in order (a fused
    // matrix of which a rank holds several ranges); stacked experts stack
    // them within every expert.
    ggml_tensor * declare_rows(const GgufFile & file, const std::string & name, const std::vector<int64_t> & shape,
                               const std::vector<TensorSlice> & parts, bool matrix = true);
    // Column ranges of one file tensor, side by side in order in every row.
    ggml_tensor * declare_cols(const GgufFile & file, const std::string & name, const std::vector<int64_t> & shape,
                               const std::vector<TensorSlice> & parts, bool matrix);
    // Declares an adapter file's pairs, split as their base matrices
    // (runtime/model/lora_adapter.cpp).
    void declare_adapter(const GgufFile & adapter, const GgufFile & model, const HParams & hp);
    const std::vector<Part> & parts_of(const ggml_tensor * t) const;
    ggml_tensor * add_tensor(const std::string & name, ggml_type type, int n_dims, const int64_t * ne, bool matrix,
                             std::vector<Part> parts);
    void allocate_and_read(const GgufFile & file, bool progress);
    class Staging;
    void read_tensor(ggml_tensor * t, const std::vector<Part> & parts, Staging & staging) const;
    // Reads a whole tensor to dst; returns its bytes.
    size_t read_whole(const GgufFile & file, const Part & part, uint8_t * dst) const;
    // Reads every row's column-range parts, side by side, to dst.
    void read_columns(const ggml_tensor * t, const std::vector<Part> & parts, uint8_t * dst) const;
    // Reads one row-range part's rows of one 2D slab to dst; returns their bytes.
    size_t read_rows(const GgufFile & file, const Part & part, int64_t slab, uint8_t * dst) const;

    std::vector<std::pair<ggml_tensor *, std::vector<Part>>> sources_;
    const RankShard * shard_;
    ggml_backend_dev_t device_;
    bool check_data_ = false;
    bool one_pass_products_ = false;
    ggml_backend_buffer_type_t host_buft_ = nullptr;
    ggml_backend_buffer_type_t repack_buft_ = nullptr;
    ggml_context_ptr host_ctx_;
    ggml_context_ptr repack_ctx_;
    ggml_context_ptr control_ctx_;
    std::vector<ggml_backend_buffer_ptr> buffers_;
    int64_t n_params_ = 0;
};

}  // namespace llama_tp
