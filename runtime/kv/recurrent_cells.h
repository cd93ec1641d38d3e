#pragma once
// Which positions each sequence's recurrent state has taken in: linear
// attention (AttentionBlock::Kind::GatedDeltaNet) keeps one fixed-size state
// per sequence instead of a cell per position, so a sequence can only go on
// from where its state is, and a state that lost positions it took in cannot
// be trimmed back: it is lost, and the sequence starts again at 0. No
// tensors: every rank keeps one next to its cache, rank 0 one more (as
// KvCells).

#include "runtime/batch.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace llama_tp {

// Consecutive batch tokens of n_seqs sequences, n_tokens each, that go
// through linear attention in one operation: sequence j's tokens are
// [t0 + j * n_tokens, t0 + (j + 1) * n_tokens) and its state row is
// StatePlacement::rows[first + j].
struct StateRun {
    int32_t t0 = 0;
    int32_t n_tokens = 0;
    int32_t n_seqs = 0;
    int32_t first = 0;
    int32_t size() const { return n_tokens * n_seqs; }
    bool operator==(const StateRun & o) const {
        return t0 == o.t0 && n_tokens == o.n_tokens && n_seqs == o.n_seqs && first == o.first;
    }
};

// Where a batch's sequences read and write their states.
struct StatePlacement {
    std::vector<StateRun> runs;
    std::vector<int32_t> rows;  // per sequence of the runs, in order: its state row
    std::vector<float> keep;    // the same: 1 to go on from the state, 0 to start from zeros (Rank::clear_new_states)
    std::vector<std::pair<int32_t, int32_t>> before;  // (sequence, next) before the batch
};

class RecurrentCells {
  public:
    // saves: every sequence has a second state row, where save() keeps its
    // state (KvPoolSizes::saved_states).
    explicit RecurrentCells(int32_t n_seq_max, bool saves = false)
        : next_(n_seq_max, 0), saved_(saves ? n_seq_max : 0, kLost) {}

    // Takes a batch in: every sequence's tokens must be consecutive in the
    // batch, at consecutive positions from where its state is. Returns false
    // (changing nothing, saying why) otherwise.
    bool place(const Batch & batch, StatePlacement & out, std::string * why = nullptr);
    // Undoes place(). stepped: a step may have written the states already
    // (it failed on the way), so they are lost rather than restored.
    void unplace(const StatePlacement & placement, bool stepped = false);

    // Removing positions the state took in loses it, unless all of them go
    // (then it starts again from zeros) or the tail from where save() kept
    // it goes: then the saved state comes back, and the result is the row
    // pair (from, to) to copy it through (else {-1, -1}).
    std::pair<int32_t, int32_t> seq_remove(int32_t seq, int32_t p0, int32_t p1);
    // Keeps the sequence's state as it is now in its second row; returns the
    // row pair (from, to) to copy ({-1, -1}: nothing kept, the state is lost
    // or there are no second rows).
    std::pair<int32_t, int32_t> save(int32_t seq);
    // Moving the state's last positions moves where it goes on; moving any
    // others loses it.
    void seq_shift(int32_t seq, int32_t p0, int32_t p1, int32_t delta);
    // A copy carries the state only when it copies all src took in into an
    // empty seq.
    bool copy_fits(int32_t src, int32_t seq, int32_t p0, int32_t p1) const;
    void seq_copy(int32_t src, int32_t seq);
    // Whether the sequence can go on at position n.
    bool resumable(int32_t seq, int32_t n) const { return n == 0 || next(seq) == n || saved(seq) == n; }
    int32_t next(int32_t seq) const { return seq >= 0 && seq < n_seq_max() ? next_[seq] : kLost; }
    int32_t n_seq_max() const { return (int32_t) next_.size(); }
    // Where the saved state of the sequence is (kLost: none).
    int32_t saved(int32_t seq) const { return seq >= 0 && seq < (int32_t) saved_.size() ? saved_[seq] : kLost; }

    static constexpr int32_t kLost = -1;

  private:
    std::vector<int32_t> next_;  // per sequence: its state took in positions [0, next); kLost
    // Per sequence (with second rows): its second row holds the state at
    // [0, saved); kLost: nothing to go back to.
    std::vector<int32_t> saved_;
};

}  // namespace llama_tp
