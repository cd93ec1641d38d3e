#pragma once
// The runtime a server or tool drives: a loaded model, its KV cache, and
// batched decode over many sequences. Not thread-safe: one thread owns it.

#include "runtime/batch.h"
#include "runtime/engine_options.h"
#include "runtime/model/classifier_head.h"
#include "runtime/model_info.h"
#include "runtime/ranks/collective_stats.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llama_tp {

class Tokenizer;

// What a model's KV cache takes, read from its file's header (no tensor
// data), for sizing a context before loading: F16 keys and values.
struct KvFootprint {
    int32_t n_ctx_train = 0;
    uint64_t bytes_per_cell = 0;  // keys and values of the layers that keep every cell, all ranks together
    uint64_t weight_bytes = 0;
    // What a slot keeps whatever the context: the sliding-window layers'
    // cache where they keep only their window (KvPoolSizes; else they count
    // in bytes_per_cell) and linear attention's states (F32).
    uint64_t fixed_bytes_per_slot = 0;
};

// Of the model the options name, cached as they ask: n_batch and swa_full
// size the sliding-window layers' cache, draft_states doubles the states.
KvFootprint kv_footprint(const EngineOptions & options);

// Whether a program must turn ggml's own CUDA graphs off for the process
// (GGML_CUDA_DISABLE_GRAPHS=1) before it loads anything: whole steps are to
// be captured (LLAMA_TP_COLLECTIVE_GRAPH_CAPTURE), and one capture cannot
// hold another. ggml reads the variable once, at its first graph; the
// runtime never changes the environment. Throws llama_tp::Error for a
// malformed value.
bool ggml_graphs_off_for_capture(const Environment & env);

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
    // With EngineOptions::keep_hidden: the final-normed hidden state
    // (n_embd floats) of batch row i of the last decode(), every row.
    virtual const float * hidden(int32_t batch_row) const = 0;
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
    // Whether a sequence can be cut back and go on from an earlier position
    // (a rejected draft, a context shift, a reused chunk): false where a
    // recurrent state (linear attention) took the later positions in; such
    // a sequence goes on only from its end or starts again at 0.
    virtual bool can_rewind() const = 0;
    // With EngineOptions::draft_states, on a recurrent model: keeps the
    // sequence's state as it is now (on every rank with the next step), so
    // that a later seq_remove of the positions from here on takes it back
    // here instead of losing it. Nothing on other models.
    virtual void seq_save_state(int32_t seq) = 0;
    // Whether a sequence can take back positions a draft added: can_rewind(),
    // or a recurrent model with EngineOptions::draft_states.
    virtual bool can_take_back_drafts() const = 0;
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
    // Of which its weights (its slices and the mirrored tensors).
    virtual std::vector<uint64_t> rank_weight_bytes() const = 0;

    // Per rank; safe to call from any thread while decode() runs.
    virtual std::vector<CollectiveStats> collective_stats() const = 0;
};

}  // namespace llama_tp
