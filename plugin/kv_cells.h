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

#include "plugin/batch.h"

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

class KvCells {
  public:
    // Throws llama_tp::Error when the cells cannot hold n_seq_max sequences.
    KvCells(int32_t n_cells, int32_t n_seq_max, bool unified);

    int32_t n_cells() const { return (int32_t) cells_.size(); }
    int32_t n_seq_max() const { return n_seq_max_; }
    bool unified() const { return unified_; }
    // Cells one sequence may use: all of them (unified) or its region.
    int32_t n_cells_per_seq() const { return region_; }
    int32_t n_free() const;

    // Chooses a free cell for every batch token and records the tokens there.
    // Returns false (changing nothing, saying why in *why) when a token finds
    // no free cell.
    bool place(const Batch & batch, std::vector<int64_t> & cells, std::string * why = nullptr);
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
    // positions back (sliding-window layers), in the same pass.
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
    // nothing) when seq has too few free cells.
    bool seq_copy(int32_t src, int32_t seq, int32_t p0, int32_t p1, std::vector<std::pair<int64_t, int64_t>> & copied);
    int32_t seq_pos_max(int32_t seq) const;
    // The cells holding positions [0, n) of a sequence, in position order;
    // false when one of them is not cached.
    bool cells_of(int32_t seq, int32_t n, std::vector<int64_t> & cells) const;

    static constexpr int32_t kWindowGranularity = 256;

  private:
    struct Cell {
        int32_t pos = -1;  // -1: free
        int32_t seq = -1;
    };
    std::vector<Cell> cells_;
    int32_t n_seq_max_;
    bool unified_;
    int32_t region_;                 // cells per sequence region (all cells when unified)
    std::vector<int32_t> used_end_;  // per region: one past its highest used cell (absolute)

    static bool joins_as_stream(const AttentionRun & run, const AttentionRun & next);
    int32_t region_of(int32_t seq) const { return unified_ ? 0 : seq; }
    int32_t region_begin(int32_t region) const { return region * region_; }
    // n_used cells rounded up to the window granularity, at most cap.
    static int32_t rounded_window(int32_t n_used, int32_t cap);
    void update_used_end(int32_t region);
    void update_all_used_ends();
};

}  // namespace llama_tp
