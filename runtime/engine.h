#pragma once
// The runtime a server or tool drives: a loaded model, its KV cache, and
// batched decode over many sequences. Not thread-safe: one thread owns it.

#include "ggml-ext/comm/allreduce_engine.h"
#include "runtime/batch.h"
#include "runtime/model/classifier_head.h"
#include "runtime/model/control_vector.h"
#include "runtime/model/gguf_file.h"
#include "runtime/kv/kv_cache.h"
#include "runtime/model_info.h"
#include "runtime/ranks/rank_devices.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llama_tp {

class ProcessGroup;
class Tokenizer;

// How often and how long a rank has waited in collectives since loading.
struct CollectiveStats {
    int64_t calls = 0;
    double seconds = 0.0;
};

// A LoRA adapter GGUF and the scale its changes get where a batch gives none.
struct LoraOptions {
    std::string path;
    float scale = 1.0f;
};

struct EngineOptions {
    std::string model_path;
    int32_t n_ctx = 4096;   // KV cells, shared by all sequences; 0: the model's training context
    int32_t n_seq_max = 1;  // sequences (server slots) that can be live at once
    // false: each sequence owns n_ctx / n_seq_max cells and attends over those
    // only, decode tokens through llama-tp's attention kernel; true: one pool
    // of cells for all sequences and ggml's attention throughout, which gives
    // exactly upstream's numbers (upstream's kv_unified).
    bool kv_unified = false;
    // Element types of the cached keys and values (-ctk / -ctv). Anything but
    // F16 goes through ggml's attention kernel in both layouts.
    KvTypes kv_types;
    // Outputs are the final-normed hidden states (embedding(), n_embd floats
    // a row) instead of logits.
    bool embeddings = false;
    // RoPE settings that replace the model's (llama-server's --rope-* and --yarn-*).
    RopeOverrides rope;
    int32_t n_batch = 512;  // most tokens one decode() call accepts
    // Sliding-window layers keep every cell of the context (llama-server's
    // --swa-full) instead of their window and a batch (KvPoolSizes).
    bool swa_full = false;
    int32_t n_threads = 0;  // 0: all cores
    // Another engine of this process computes on the same cores between this
    // one's steps (a draft model): the CPU ranks' threads then sleep between
    // graphs instead of polling, so that the two pools do not spin against
    // each other.
    bool shares_cores = false;
    DeviceOptions devices;  // where the ranks run (-dev, -ngl)
    // Every rank's graph takes ggml's operations only, as on a GPU, even on
    // the CPU: ggml's attention, float sums, collectives between graph
    // segments through host memory. For checking the GPU ranks' path on any
    // machine.
    bool portable_graph = false;
    bool progress = true;  // load progress on stderr for large files
    // Every weight value read is checked, and a NaN, an infinity or a bad
    // block scale stops the load naming the tensor (--check-tensors).
    bool check_tensors = false;
    // LoRA adapters of the model (at most 64), split as the matrices they
    // change; Batch::lora scales them token by token.
    std::vector<LoraOptions> loras;
    // Metadata read in place of the model file's (--override-kv).
    std::vector<MetadataOverride> metadata_overrides;
    // Control vectors, summed at their scales, added to the outputs of the
    // layers in range on every rank (runtime/model/control_vector.h).
    std::vector<ControlVectorOptions> control_vectors;
    ControlVectorRange control_range;

    // Tensor parallelism: tp ranks in this process (threads), times the
    // processes of an MPI launch (join_launched_processes(); nullptr: this
    // process alone). Process p holds ranks [p * tp, p * tp + tp).
    int32_t tp = 1;
    ProcessGroup * processes = nullptr;
    std::vector<float> tensor_split;  // empty: even
    std::string allreduce = "auto";   // --allreduce; "auto" honours LLAMA_TP_ALLREDUCE
    // The float sums' wire: --bf16-wire, --f32-wire; unset: the engine's
    // (F32 in host memory, BF16 from a size on between GPUs). Split-invariant
    // sums take F32 whatever is asked.
    std::optional<WireType> allreduce_wire;
    // Results that do not depend on the split: the row-parallel products are
    // summed on a reduction grid fixed by the model and added exactly, so
    // every --tp and -ts on the grid, one device included, gives the same
    // logits (ShardPlan); F64 crosses the wire. false: ggml's float sums
    // (--no-split-invariant), upstream's numbers on one device. Unset: on
    // where it costs nothing, when every row-parallel matrix of the model is
    // multiplied in one pass (ModelWeights::row_parallel_in_one_pass) and the
    // wire is not BF16 (which rounds the sums); the engine decides at load.
    std::optional<bool> split_invariant;
    // The mode in use, once the engine has decided (Engine::options()).
    bool exact_sums() const { return split_invariant.value_or(false); }
    // With split-invariant sums, every other dense q8_0 matrix (attention
    // and FFN projections, the output head) is multiplied by the same
    // one-pass kernel as the row-parallel ones, with one cell: each output
    // then depends on its own row and token only, so a q8_0 model's logits
    // are the same in any batch. Unset: where that kernel is faster than
    // ggml's q8_0 product on this CPU (ggml_ext_exact_matmul_preferred), or
    // as LLAMA_TP_ONE_PASS_PRODUCTS (1 or 0) says; the engine decides at load.
    std::optional<bool> one_pass_products;
};

class Engine {
  public:
    // Throws llama_tp::Error naming the file (and tensor) on any load failure.
    static std::unique_ptr<Engine> load(const EngineOptions & options);
    virtual ~Engine() = default;

    // Runs one forward pass. Throws llama_tp::Error on a bad batch (token out of
    // range, sequence id out of range, too many tokens, no KV room); the cache
    // is left as it was before the call.
    virtual void decode(const Batch & batch) = 0;

    // In a group of processes only process 0 drives (decode, logits); the
    // others are followers: follow() runs the steps process 0 sends until it
    // ends the group (its engine is destroyed), then returns. Throws
    // llama_tp::Error when a step fails on this process.
    virtual bool follower() const = 0;
    virtual void follow() = 0;

    // Why the rank group failed for good ("" while it works): a rank died,
    // stopped answering, or failed a step. Safe from any thread.
    virtual std::string failure() const = 0;
    // Fails the rank group from outside: a decode waiting in a collective
    // returns at once and throws. The group stays failed.
    virtual void abort(const std::string & why) = 0;

    // Frees every rank's weights, KV cache and buffers, keeping the
    // tokenizer, info() and options(); until wake() loads the ranks again
    // (from the model file, the cache empty) decode and the sequence calls
    // throw. One process only: throws llama_tp::Error in a group of
    // processes. wake() throws llama_tp::Error as load() does, the engine
    // staying asleep.
    virtual void sleep() = 0;
    virtual void wake() = 0;
    virtual bool asleep() const = 0;

    // Logits of batch row i of the last decode(); only rows that asked for them.
    virtual const float * logits(int32_t batch_row) const = 0;
    // With EngineOptions::embeddings: the hidden state (n_embd floats) of batch row i.
    virtual const float * embedding(int32_t batch_row) const = 0;
    // With EngineOptions::embeddings, on process 0: a reranker's
    // classification head; nullptr when the model has none.
    virtual const ClassifierHead * classifier() const = 0;

    // KV cache: drop positions [p0, p1) of a sequence (p1 < 0: to the end).
    virtual void seq_remove(int32_t seq, int32_t p0, int32_t p1) = 0;
    // Context shift: moves positions [p0, p1) of a sequence by delta (p1 < 0:
    // to the end; those that would fall below 0 are removed), rotating their
    // keys to the new positions on every rank with the next step.
    virtual void seq_shift(int32_t seq, int32_t p0, int32_t p1, int32_t delta) = 0;
    // Copies positions [p0, p1) of sequence src into sequence seq (p1 < 0: to
    // the end), on every rank with the next step: seq then continues from
    // src's keys and values without computing them. False, changing
    // nothing, when seq lacks the free cells.
    virtual bool seq_copy(int32_t src, int32_t seq, int32_t p0, int32_t p1) = 0;
    virtual int32_t seq_pos_max(int32_t seq) const = 0;  // -1 when empty
    // Whether a sequence cached up to at least n can continue at position n
    // after its later positions are removed: sliding-window layers keep
    // only their window's last positions, so a shorter prefix may have lost
    // the ones it reads (then the prompt is computed again).
    virtual bool seq_resumable(int32_t seq, int32_t n) const = 0;
    virtual int32_t n_free_cells() const = 0;

    // A sequence's cached keys and values, positions [0, n), as one image in
    // the whole model's head layout (runtime/kv/kv_image.h), which any --tp / -ts
    // of the same model and cache types loads back. Throws llama_tp::Error
    // when a position is not cached.
    virtual std::vector<uint8_t> read_sequence(int32_t seq, int32_t n) = 0;
    // The size of read_sequence's image of n positions.
    virtual size_t sequence_image_bytes(int32_t n) const = 0;
    // Whether a sequence written from an image of positions [0, n) can
    // continue at position m <= n (seq_resumable): sliding-window layers that
    // keep their window have only an image's last cells.
    virtual bool image_resumable(int32_t n, int32_t m) const = 0;
    // Replaces a sequence's cache with tokens at positions [0, tokens.size())
    // whose keys and values come from image instead of a forward pass. Throws
    // llama_tp::Error when the image has the wrong size (the sequence keeps
    // what it held) or does not fit (the sequence is then empty).
    virtual void write_sequence(int32_t seq, const std::vector<int32_t> & tokens,
                                const std::vector<uint8_t> & image) = 0;

    virtual const Tokenizer & tokenizer() const = 0;
    virtual const ModelInfo & info() const = 0;
    virtual const EngineOptions & options() const = 0;

    // How many times a graph was built and allocated (decode steps of an
    // unchanged shape reuse the last one).
    virtual int64_t graph_builds() const = 0;

    // Device memory each rank holds: weights, KV cache, compute buffer.
    virtual std::vector<uint64_t> rank_memory_bytes() const = 0;

    // Per rank; safe to call from any thread while decode() runs.
    virtual std::vector<CollectiveStats> collective_stats() const = 0;
};

}  // namespace llama_tp
