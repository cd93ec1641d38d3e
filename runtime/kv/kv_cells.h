#pragma once
// Which sequence and position every KV cell holds, and the choices that
// follow from it: where a batch's tokens go, how its attention is grouped,
// its mask. No tensors: every rank keeps one next to its cache, and rank 0
// one more to decide a step before any rank runs it (the same state and the
// same algorithm give every copy the same answers).
//
// Two layouts. Unified: all sequences share one pool of cells and attention
// masks keep them apart (what upstream calls kv_unified). Per sequence: each
// sequence owns n_cells / n_seq_max consecutive cells, so attention for a
// sequence reads only its own region, however many other sequences are live.
//
// A window pool (keep >= 0) serves sliding-window layers: a sequence needs
// only its last `keep` positions besides the batch, so a batch is appended
// after the last used cell and, when the room runs out, the cells still
// needed are packed down (KvMove) and the rest dropped. Packing keeps the
// cells in order and, without holes, their offsets modulo
// kWindowGranularity: attention then adds the same cells in the same lanes
// as over a full pool, and gives the same numbers.

#include "runtime/batch.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ggml.h"

namespace llama_tp {

// Consecutive batch tokens attending over their cells: n_streams groups of
// n_tokens tokens from t0 on, group j over cells [cell0 + j * stride,
// cell0 + j * stride + window). Several streams let one attention op serve
// the decode tokens of neighbouring sequences.
struct AttentionRun {
    int32_t t0 = 0;
    int32_t n_tokens = 0;
    int32_t cell0 = 0;
    int32_t window = 0;
    int32_t n_streams = 1;
    int32_t stride = 0;  // cells between streams
    int32_t size() const { return n_tokens * n_streams; }
    bool operator==(const AttentionRun & o) const {
        return t0 == o.t0 && n_tokens == o.n_tokens && cell0 == o.cell0 && window == o.window &&
               n_streams == o.n_streams && stride == o.stride;
    }
};

// A cell's keys and values move from one row to another (a window pool's packing).
struct KvMove {
    int64_t from = 0;
    int64_t to = 0;
    bool operator==(const KvMove & o) const { return from == o.from && to == o.to; }
};

class KvCells {
  public:
    // Throws llama_tp::Error when the cells cannot hold n_seq_max sequences.
    // keep >= 0: a window pool (above).
    KvCells(int32_t n_cells, int32_t n_seq_max, bool unified, int32_t keep = -1);

    int32_t n_cells() const { return (int32_t) cells_.size(); }
    int32_t n_seq_max() const { return n_seq_max_; }
    bool unified() const { return unified_; }
    // Cells one sequence may use: all of them (unified) or its region.
    int32_t n_cells_per_seq() const { return region_; }
    int32_t n_free() const;
    bool windowed() const { return keep_ >= 0; }
    int32_t keep() const { return keep_; }

    // Chooses a free cell for every batch token and records the tokens there.
    // Returns false (changing nothing, saying why in *why) when a token finds
    // no free cell. A window pool may pack its cells first: the moves, in an
    // order safe to apply one by one, are appended to *moved.
    bool place(const Batch & batch, std::vector<int64_t> & cells, std::string * why = nullptr,
               std::vector<KvMove> * moved = nullptr);
    // Undoes place() for a batch whose compute failed.
    void unplace(const std::vector<int64_t> & cells);

    // Cells [0, window) hold every used cell; rounded up so that the attention
    // shape (and so the graph) stays the same for many decode steps.
    int32_t window() const;
    // How the batch's attention is computed: per sequence layout and tokens
    // grouped by sequence: one run per group over that sequence's region,
    // single tokens of consecutive sequences joined into one run of several
    // streams; otherwise one run of all tokens over window().
    std::vector<AttentionRun> attention_runs(const Batch & batch) const;
    // mask[(j * run.n_tokens + t) * run.window + c] = 0 where token t of
    // stream j may attend to cell c of that stream's window, -inf elsewhere;
    // mask_swa, when given, the same with -inf also for cells n_swa or more
    // positions back (sliding-window layers), in the same pass. Either may be
    // null.
    void fill_mask(const Batch & batch, const AttentionRun & run, ggml_fp16_t * mask, ggml_fp16_t * mask_swa = nullptr,
                   int32_t n_swa = 0) const;

    void seq_remove(int32_t seq, int32_t p0, int32_t p1);
    // Moves positions [p0, p1) of a sequence by delta (those that would fall
    // below 0 are removed); returns the cells moved, whose keys the caller
    // rotates by delta.
    std::vector<int64_t> seq_shift(int32_t seq, int32_t p0, int32_t p1, int32_t delta);
    // Copies the cells of positions [p0, p1) of sequence src into the lowest
    // free cells that seq may use, in src's cell order (so attention adds them
    // in the same order). Returns the (from, to) cell pairs, or false (changing
    // nothing) when seq has too few free cells. A window pool copies only the
    // last `keep` positions before p1, after packing seq's cells if needed
    // (*moved, applied before the copies).
    bool seq_copy(int32_t src, int32_t seq, int32_t p0, int32_t p1, std::vector<std::pair<int64_t, int64_t>> & copied,
                  std::vector<KvMove> * moved = nullptr);
    // Whether seq_copy would succeed, changing nothing.
    bool copy_fits(int32_t src, int32_t seq, int32_t p0, int32_t p1) const;
    int32_t seq_pos_max(int32_t seq) const;
    // The cells holding positions [0, n) of a sequence (a window pool: the
    // last `keep` of them), in position order; false when one of them is not
    // cached.
    bool cells_of(int32_t seq, int32_t n, std::vector<int64_t> & cells) const;
    // Whether the sequence can continue at position n: every position it
    // reads there is cached (always true of a full pool, whose callers track
    // what they hold).
    bool resumable(int32_t seq, int32_t n) const;

    static constexpr int32_t kWindowGranularity = 256;

  private:
    struct Cell {
        int32_t pos = -1;  // -1: free
        int32_t seq = -1;
    };
    std::vector<Cell> cells_;
    int32_t n_seq_max_;
    bool unified_;
    int32_t keep_;                   // < 0: a full pool
    int32_t region_;                 // cells per sequence region (all cells when unified)
    std::vector<int32_t> used_end_;  // per region: one past its highest used cell (absolute)

    static bool joins_as_stream(const AttentionRun & run, const AttentionRun & next);
    int32_t region_of(int32_t seq) const { return unified_ ? 0 : seq; }
    int32_t region_begin(int32_t region) const { return region * region_; }
    // n_used cells rounded up to the window granularity, at most cap.
    static int32_t rounded_window(int32_t n_used, int32_t cap);
    void update_used_end(int32_t region);
    void update_all_used_ends();

    // The first position each sequence will read from: next[seq] - keep_,
    // where next[seq] is given or one past its last cached position.
    std::vector<int32_t> first_needed(std::vector<int32_t> next) const;
    // Cells of a region a window pool keeps, in order, given first_needed().
    std::vector<int32_t> kept_cells(int32_t region, const std::vector<int32_t> & first) const;
    // Free cells after packing a region's kept cells.
    int32_t room_after_packing(int32_t region, const std::vector<int32_t> & kept) const;
    // Packs the kept cells down, dropping the others (no-op when there is
    // room for `need` cells already).
    void pack(int32_t region, int32_t need, const std::vector<int32_t> & first, std::vector<KvMove> * moved);
    bool place_window(const Batch & batch, std::vector<int64_t> & cells, std::string * why,
                      std::vector<KvMove> * moved);
    // Appends the batch after each region's last used cell, gap[r] cells on.
    bool append(const Batch & batch, const std::vector<int32_t> & gap, std::vector<int64_t> & cells);
    // first_needed() when seq continues at p1 from a copy of src's [lo, p1),
    // which must survive packing.
    std::vector<int32_t> copy_first_needed(int32_t src, int32_t seq, int32_t lo, int32_t p1) const;
    // Cells a sequence's empty region skips so that position pos lands at its
    // offset within a block, as it does in the full pool (per-sequence layout).
    int32_t lane_gap(int32_t region, int32_t pos) const;
    // The cells of src that a window copy of [p0, p1) takes, in cell order;
    // false when one of them is missing.
    bool window_copy_cells(int32_t src, int32_t p0, int32_t p1, std::vector<int32_t> & from) const;
};

}  // namespace llama_tp
