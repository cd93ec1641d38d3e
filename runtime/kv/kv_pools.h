#pragma once
// The cells' bookkeeping of a whole KV cache: one pool for every layer and,
// where the model's sliding-window layers would otherwise keep far more
// cells than their window reads, a window pool for those layers (KvCells
// with keep = window - 1). Every edit and every batch goes to both pools in
// the same order, so every copy of the bookkeeping agrees.

#include "runtime/kv/kv_cells.h"
#include "runtime/kv/recurrent_cells.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace llama_tp {

struct HParams;

struct KvPoolSizes {
    int32_t n_cells = 0;  // the pool of every layer
    int32_t n_seq_max = 1;
    bool unified = false;
    int32_t window_keep = -1;  // < 0: no window pool
    int32_t window_cells = 0;
    bool recurrent = false;  // some layer keeps a state per sequence (RecurrentCells)
    // A recurrent model keeps a second state row per sequence, for the state
    // saved before a draft is checked (EngineOptions::draft_states).
    bool saved_states = false;
    bool windowed() const { return window_keep >= 0; }

    // The window pool holds what a batch of n_batch tokens needs besides the
    // window before it, with room to pack, when that is less than n_ctx;
    // swa_full (llama-server's --swa-full): sliding-window layers keep every
    // cell. whole_windows: each sequence's region (the pool, unified) is
    // rounded up to a multiple of KvCells::kWindowGranularity cells, so that
    // no attention window is capped off one (ggml's CUDA attention takes its
    // fast kernels for caches of a multiple of 256 cells only).
    static KvPoolSizes of(const HParams & hp, int32_t n_ctx, int32_t n_seq_max, bool unified, int32_t n_batch,
                          bool swa_full, bool whole_windows = false);
    // The window pool's cells for one sequence (per-sequence layout); 0 when
    // the model has no sliding-window layer with a cache of its own.
    static int32_t window_cells_per_sequence(const HParams & hp, int32_t n_batch);
};

// Where a batch went: its cells in the full pool, in the window pool (of a
// load: only the tokens the window keeps), and the window pool's packing.
struct KvPlacement {
    std::vector<int64_t> cells, window_cells;
    std::vector<KvMove> moves;
    StatePlacement states;  // a recurrent model's
    uint64_t digest() const;
};

// Cells whose positions a shift moved, per pool.
struct KvShifted {
    std::vector<int64_t> cells, window_cells;
};

// What a copy between sequences did, per pool: (from, to) cells, and the
// window pool's packing (applied first).
struct KvCopy {
    std::vector<std::pair<int64_t, int64_t>> cells, window_cells;
    std::vector<KvMove> moves;
    std::pair<int32_t, int32_t> states{-1, -1};  // (from, to) state rows; -1: none
};

class KvPools {
  public:
    explicit KvPools(const KvPoolSizes & sizes);

    const KvPoolSizes & sizes() const { return sizes_; }
    const KvCells & all() const { return all_; }
    const KvCells * window() const { return sizes_.windowed() ? &window_ : nullptr; }
    const RecurrentCells * states() const { return sizes_.recurrent ? &states_ : nullptr; }

    // As KvCells::place, in both pools. load: the batch's cells come from an
    // image, which holds only the window's last positions for the window pool.
    bool place(const Batch & batch, KvPlacement & out, std::string * why = nullptr, bool load = false);
    // stepped: the step ran, at least in part (RecurrentCells::unplace).
    void unplace(const KvPlacement & placement, bool stepped = false);
    // Returns the state rows (from, to) to copy where the removal takes the
    // sequence back to its saved state (RecurrentCells::seq_remove).
    std::pair<int32_t, int32_t> seq_remove(int32_t seq, int32_t p0, int32_t p1);
    // RecurrentCells::save; {-1, -1} without a saved-state row.
    std::pair<int32_t, int32_t> save_state(int32_t seq) {
        return states() && sizes_.saved_states ? states_.save(seq) : std::pair<int32_t, int32_t>{-1, -1};
    }
    KvShifted seq_shift(int32_t seq, int32_t p0, int32_t p1, int32_t delta);
    // False, changing nothing, when either pool cannot take the copy (the
    // window pool: src no longer holds the window before p1).
    bool seq_copy(int32_t src, int32_t seq, int32_t p0, int32_t p1, KvCopy & out);
    int32_t seq_pos_max(int32_t seq) const { return all_.seq_pos_max(seq); }
    int32_t n_free() const { return all_.n_free(); }
    // Whether the sequence can continue at position n (KvCells::resumable,
    // RecurrentCells::resumable).
    bool resumable(int32_t seq, int32_t n) const {
        return (!window() || window_.resumable(seq, n)) && (!states() || states_.resumable(seq, n));
    }
    // As KvCells::cells_of, per pool.
    bool cells_of(int32_t seq, int32_t n, std::vector<int64_t> & cells, std::vector<int64_t> & window_cells) const;

  private:
    KvPoolSizes sizes_;
    KvCells all_;
    KvCells window_;  // one cell per sequence when there is no window pool
    RecurrentCells states_;
};

}  // namespace llama_tp
