#include "runtime/kv/kv_cells.h"

#include "runtime/error.h"

#include <algorithm>
#include <cmath>

namespace llama_tp {

KvCells::KvCells(int32_t n_cells, int32_t n_seq_max, bool unified, int32_t keep)
    : n_seq_max_(n_seq_max), unified_(unified), keep_(keep) {
    if (n_seq_max < 1) throw Error("the KV cache needs room for at least one sequence");
    region_ = unified_ ? n_cells : n_cells / n_seq_max;
    if (region_ < 1) {
        throw Error("a context of " + std::to_string(n_cells) + " cells cannot hold " + std::to_string(n_seq_max) +
                    " sequences");
    }
    cells_.resize(unified_ ? (size_t) n_cells : (size_t) region_ * n_seq_max);
    used_end_.resize(unified_ ? 1 : n_seq_max);
    update_all_used_ends();
}

int32_t KvCells::n_free() const {
    return (int32_t) std::count_if(cells_.begin(), cells_.end(), [](const Cell & c) { return c.pos < 0; });
}

bool KvCells::place(const Batch & batch, std::vector<int64_t> & cells, std::string * why, std::vector<KvMove> * moved) {
    if (windowed()) return place_window(batch, cells, why, moved);
    cells.clear();
    // Lowest free cells first, so that windows stay small.
    std::vector<int32_t> cursor(used_end_.size());
    for (size_t r = 0; r < cursor.size(); ++r) cursor[r] = region_begin((int32_t) r);
    for (int i = 0; i < batch.size(); ++i) {
        const int32_t r = region_of(batch.seq[i]);
        const int32_t end = region_begin(r) + region_;
        int32_t c = cursor[r];
        while (c < end && cells_[c].pos >= 0) ++c;
        if (c == end) {
            unplace(cells);
            cells.clear();
            if (why) {
                *why = unified_ ? "the batch needs " + std::to_string(batch.size()) + " cells, " +
                                      std::to_string(n_free()) + " are free (context " + std::to_string(n_cells()) + ")"
                                : "sequence " + std::to_string(batch.seq[i]) + " has used all " +
                                      std::to_string(region_) + " cells of its share of the context";
            }
            return false;
        }
        cells_[c] = Cell{batch.pos[i], batch.seq[i]};
        cells.push_back(c);
        cursor[r] = c + 1;
        used_end_[r] = std::max(used_end_[r], c + 1);
    }
    return true;
}

void KvCells::unplace(const std::vector<int64_t> & cells) {
    for (int64_t c : cells) cells_[c] = Cell{};
    update_all_used_ends();
}

int32_t KvCells::rounded_window(int32_t n_used, int32_t cap) {
    const int32_t g = kWindowGranularity;
    return std::min(std::max<int32_t>(1, (n_used + g - 1) / g) * g, cap);
}

// Single decode tokens of neighbouring sequences join one run. Each row's
// attention is computed alone over its own visible cells, so joining changes
// no sequence's numbers.
bool KvCells::joins_as_stream(const AttentionRun & run, const AttentionRun & next) {
    return run.n_tokens == 1 && next.n_tokens == 1 && next.t0 == run.t0 + run.n_streams;
}

int32_t KvCells::window() const {
    return rounded_window(*std::max_element(used_end_.begin(), used_end_.end()), n_cells());
}

std::vector<AttentionRun> KvCells::attention_runs(const Batch & batch) const {
    const int32_t n = batch.size();
    const std::vector<AttentionRun> whole{{0, n, 0, window()}};
    if (unified_) return whole;
    std::vector<AttentionRun> runs;
    std::vector<uint8_t> seen(n_seq_max_, 0);
    int32_t last_seq = -1;
    for (int32_t t = 0; t < n;) {
        const int32_t seq = batch.seq[t];
        if (seen[seq]) return whole;  // a sequence split over two groups
        seen[seq] = 1;
        int32_t end = t + 1;
        while (end < n && batch.seq[end] == seq) ++end;
        const int32_t begin = region_begin(seq);
        const AttentionRun run{t, end - t, begin, rounded_window(used_end_[seq] - begin, region_), 1, region_};
        if (!runs.empty() && joins_as_stream(runs.back(), run) && seq == last_seq + 1) {
            runs.back().n_streams++;
            runs.back().window = std::max(runs.back().window, run.window);
        } else {
            runs.push_back(run);
        }
        last_seq = seq;
        t = end;
    }
    return runs;
}

void KvCells::fill_mask(const Batch & batch, const AttentionRun & run, ggml_fp16_t * mask, ggml_fp16_t * mask_swa,
                        int32_t n_swa) const {
    const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f);
    const ggml_fp16_t ninf = ggml_fp32_to_fp16(-INFINITY);
    for (int32_t i = 0; i < run.size(); ++i) {
        const int32_t seq = batch.seq[run.t0 + i], pos = batch.pos[run.t0 + i];
        const Cell * cells = cells_.data() + run.cell0 + (size_t) (i / run.n_tokens) * run.stride;
        ggml_fp16_t * row = mask ? mask + (size_t) i * run.window : nullptr;
        ggml_fp16_t * row_swa = mask_swa ? mask_swa + (size_t) i * run.window : nullptr;
        for (int32_t c = 0; c < run.window; ++c) {
            const bool seen = cells[c].pos >= 0 && cells[c].seq == seq && cells[c].pos <= pos;
            if (row) row[c] = seen ? zero : ninf;
            if (row_swa) row_swa[c] = seen && pos - cells[c].pos < n_swa ? zero : ninf;
        }
    }
}

void KvCells::seq_remove(int32_t seq, int32_t p0, int32_t p1) {
    if (seq < 0 || seq >= n_seq_max_) return;
    if (p1 < 0) p1 = INT32_MAX;
    const int32_t r = region_of(seq);
    for (int32_t c = region_begin(r); c < region_begin(r) + region_; ++c) {
        Cell & cell = cells_[c];
        if (cell.pos >= 0 && cell.seq == seq && cell.pos >= p0 && cell.pos < p1) cell = Cell{};
    }
    update_used_end(r);
}

std::vector<int64_t> KvCells::seq_shift(int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    std::vector<int64_t> moved;
    if (seq < 0 || seq >= n_seq_max_ || delta == 0) return moved;
    if (p1 < 0) p1 = INT32_MAX;
    const int32_t r = region_of(seq);
    for (int32_t c = region_begin(r); c < region_begin(r) + region_; ++c) {
        Cell & cell = cells_[c];
        if (cell.pos < 0 || cell.seq != seq || cell.pos < p0 || cell.pos >= p1) continue;
        if ((int64_t) cell.pos + delta < 0) {
            cell = Cell{};
            continue;
        }
        cell.pos += delta;
        moved.push_back(c);
    }
    update_used_end(r);
    return moved;
}

bool KvCells::seq_copy(int32_t src, int32_t seq, int32_t p0, int32_t p1,
                       std::vector<std::pair<int64_t, int64_t>> & copied, std::vector<KvMove> * moved) {
    copied.clear();
    if (src < 0 || src >= n_seq_max_ || seq < 0 || seq >= n_seq_max_ || src == seq) return false;
    if (windowed()) {
        if (p1 < 0) p1 = seq_pos_max(src) + 1;
        if (!copy_fits(src, seq, p0, p1)) return false;
        const int32_t to = region_of(seq), lo = std::max({0, p0, p1 - keep_});
        std::vector<int32_t> from;
        window_copy_cells(src, p0, p1, from);
        const size_t need = from.size();
        const int32_t gap = need > 0 ? lane_gap(to, lo) : 0;
        pack(to, (int32_t) need + gap, copy_first_needed(src, seq, lo, p1), moved);
        window_copy_cells(src, p0, p1, from);  // packing may have moved them (one shared pool)
        if (from.size() != need) throw Error("the sliding-window cache lost cells it was copying");
        int32_t cursor = used_end_[to] + gap;
        for (int32_t c : from) {
            cells_[cursor] = Cell{cells_[c].pos, seq};
            copied.emplace_back(c, cursor++);
        }
        used_end_[to] = cursor;
        return true;
    }
    if (p1 < 0) p1 = INT32_MAX;
    const int32_t from = region_of(src), to = region_of(seq);
    int32_t free_cell = region_begin(to);
    const int32_t to_end = region_begin(to) + region_;
    for (int32_t c = region_begin(from); c < region_begin(from) + region_; ++c) {
        const Cell cell = cells_[c];
        if (cell.pos < 0 || cell.seq != src || cell.pos < p0 || cell.pos >= p1) continue;
        while (free_cell < to_end && cells_[free_cell].pos >= 0) ++free_cell;
        if (free_cell == to_end) {
            for (const auto & pair : copied) cells_[pair.second] = Cell{};
            copied.clear();
            update_used_end(to);
            return false;
        }
        cells_[free_cell] = Cell{cell.pos, seq};
        copied.emplace_back(c, free_cell);
        used_end_[to] = std::max(used_end_[to], free_cell + 1);
    }
    return true;
}

bool KvCells::copy_fits(int32_t src, int32_t seq, int32_t p0, int32_t p1) const {
    if (src < 0 || src >= n_seq_max_ || seq < 0 || seq >= n_seq_max_ || src == seq) return false;
    const int32_t to = region_of(seq);
    if (!windowed()) {
        if (p1 < 0) p1 = INT32_MAX;
        int32_t need = 0, free = 0;
        for (int32_t c = region_begin(region_of(src)); c < region_begin(region_of(src)) + region_; ++c) {
            need += cells_[c].pos >= 0 && cells_[c].seq == src && cells_[c].pos >= p0 && cells_[c].pos < p1;
        }
        for (int32_t c = region_begin(to); c < region_begin(to) + region_; ++c) free += cells_[c].pos < 0;
        return need <= free;
    }
    if (p1 < 0) p1 = seq_pos_max(src) + 1;
    std::vector<int32_t> from;
    if (!window_copy_cells(src, p0, p1, from)) return false;
    const int32_t need = (int32_t) from.size(), lo = std::max({0, p0, p1 - keep_});
    const int32_t gap = need > 0 ? lane_gap(to, lo) : 0;
    if (region_begin(to) + region_ - used_end_[to] >= need + gap) return true;
    return room_after_packing(to, kept_cells(to, copy_first_needed(src, seq, lo, p1))) >= need;
}

std::vector<int32_t> KvCells::copy_first_needed(int32_t src, int32_t seq, int32_t lo, int32_t p1) const {
    std::vector<int32_t> next(n_seq_max_, -1);
    next[seq] = p1;
    std::vector<int32_t> first = first_needed(next);
    first[src] = std::min(first[src], lo);  // the copy reads them after any packing
    return first;
}

int32_t KvCells::lane_gap(int32_t region, int32_t pos) const {
    if (unified_ || used_end_[region] != region_begin(region)) return 0;
    return pos % kWindowGranularity;
}

bool KvCells::window_copy_cells(int32_t src, int32_t p0, int32_t p1, std::vector<int32_t> & from) const {
    from.clear();
    const int32_t lo = std::max({0, p0, p1 - keep_});
    if (p1 <= lo) return true;
    std::vector<uint8_t> seen((size_t) (p1 - lo), 0);
    const int32_t r = region_of(src);
    for (int32_t c = region_begin(r); c < region_begin(r) + region_; ++c) {
        const Cell & cell = cells_[c];
        if (cell.pos < lo || cell.seq != src || cell.pos >= p1 || seen[cell.pos - lo]) continue;
        seen[cell.pos - lo] = 1;
        from.push_back(c);
    }
    return (int32_t) from.size() == p1 - lo;
}

bool KvCells::resumable(int32_t seq, int32_t n) const {
    if (!windowed() || n <= 0) return true;
    std::vector<int64_t> cells;
    return cells_of(seq, n, cells);
}

std::vector<int32_t> KvCells::first_needed(std::vector<int32_t> next) const {
    std::vector<int32_t> last(n_seq_max_, -1);
    for (const Cell & c : cells_) {
        if (c.pos >= 0) last[c.seq] = std::max(last[c.seq], c.pos);
    }
    for (int32_t s = 0; s < n_seq_max_; ++s) next[s] = (next[s] >= 0 ? next[s] : last[s] + 1) - keep_;
    return next;
}

std::vector<int32_t> KvCells::kept_cells(int32_t region, const std::vector<int32_t> & first) const {
    std::vector<int32_t> kept;
    for (int32_t c = region_begin(region); c < used_end_[region]; ++c) {
        if (cells_[c].pos >= 0 && cells_[c].pos >= first[cells_[c].seq]) kept.push_back(c);
    }
    return kept;
}

int32_t KvCells::room_after_packing(int32_t region, const std::vector<int32_t> & kept) const {
    if (kept.empty()) return region_;
    const int32_t offset = (kept[0] - region_begin(region)) % kWindowGranularity;
    return region_ - offset - (int32_t) kept.size();
}

void KvCells::pack(int32_t region, int32_t need, const std::vector<int32_t> & first, std::vector<KvMove> * moved) {
    const int32_t begin = region_begin(region);
    if (begin + region_ - used_end_[region] >= need) return;
    const std::vector<int32_t> kept = kept_cells(region, first);
    const int32_t base = kept.empty() ? begin : begin + (kept[0] - begin) % kWindowGranularity;
    std::vector<Cell> values;
    for (int32_t c : kept) values.push_back(cells_[c]);
    std::fill(cells_.begin() + begin, cells_.begin() + begin + region_, Cell{});
    // Ascending, each cell to a row at or below its own: safe one by one.
    for (size_t i = 0; i < kept.size(); ++i) {
        const int32_t to = base + (int32_t) i;
        cells_[to] = values[i];
        if (moved && to != kept[i]) moved->push_back({kept[i], to});
    }
    update_used_end(region);
}

bool KvCells::place_window(const Batch & batch, std::vector<int64_t> & cells, std::string * why,
                           std::vector<KvMove> * moved) {
    cells.clear();
    std::vector<int32_t> need(used_end_.size(), 0), next(n_seq_max_, -1);
    for (int i = 0; i < batch.size(); ++i) {
        need[region_of(batch.seq[i])]++;
        int32_t & n = next[batch.seq[i]];
        n = n < 0 ? batch.pos[i] : std::min(n, batch.pos[i]);
    }
    std::vector<int32_t> gap(used_end_.size(), 0);
    for (int32_t s = 0; s < n_seq_max_; ++s) {
        if (next[s] >= 0) gap[region_of(s)] = lane_gap(region_of(s), next[s]);
    }
    std::vector<uint8_t> tight(need.size(), 0);  // regions that must pack first
    bool any_tight = false;
    for (int32_t r = 0; r < (int32_t) need.size(); ++r) {
        tight[r] = need[r] > 0 && region_begin(r) + region_ - used_end_[r] < need[r] + gap[r];
        any_tight |= tight[r] != 0;
    }
    if (!any_tight) return append(batch, gap, cells);
    const std::vector<int32_t> first = first_needed(next);
    for (int32_t r = 0; r < (int32_t) need.size(); ++r) {
        if (!tight[r] || room_after_packing(r, kept_cells(r, first)) >= need[r]) continue;
        if (why) {
            *why = "the batch needs " + std::to_string(need[r]) + " cells of the sliding-window cache, which keeps " +
                   std::to_string(region_) + (unified_ ? "" : " per sequence") + " (window " +
                   std::to_string(keep_ + 1) + ")";
        }
        return false;
    }
    for (int32_t r = 0; r < (int32_t) need.size(); ++r) {
        if (tight[r]) pack(r, need[r] + gap[r], first, moved);
    }
    return append(batch, gap, cells);
}

bool KvCells::append(const Batch & batch, const std::vector<int32_t> & gap, std::vector<int64_t> & cells) {
    for (int32_t r = 0; r < (int32_t) gap.size(); ++r) used_end_[r] += gap[r];
    for (int i = 0; i < batch.size(); ++i) {
        const int32_t r = region_of(batch.seq[i]);
        const int32_t c = used_end_[r]++;
        cells_[c] = Cell{batch.pos[i], batch.seq[i]};
        cells.push_back(c);
    }
    return true;
}

int32_t KvCells::seq_pos_max(int32_t seq) const {
    if (seq < 0 || seq >= n_seq_max_) return -1;
    const int32_t r = region_of(seq);
    int32_t m = -1;
    for (int32_t c = region_begin(r); c < region_begin(r) + region_; ++c) {
        if (cells_[c].pos >= 0 && cells_[c].seq == seq) m = std::max(m, cells_[c].pos);
    }
    return m;
}

bool KvCells::cells_of(int32_t seq, int32_t n, std::vector<int64_t> & cells) const {
    const int32_t lo = windowed() ? std::max(0, n - keep_) : 0;
    cells.assign((size_t) std::max(0, n - lo), -1);
    if (seq < 0 || seq >= n_seq_max_) return n <= 0;
    const int32_t r = region_of(seq);
    for (int32_t c = region_begin(r); c < region_begin(r) + region_; ++c) {
        const Cell & cell = cells_[c];
        if (cell.pos >= lo && cell.seq == seq && cell.pos < n) cells[cell.pos - lo] = c;
    }
    for (int64_t c : cells) {
        if (c < 0) return false;
    }
    return true;
}

void KvCells::update_used_end(int32_t region) {
    const int32_t begin = region_begin(region);
    int32_t end = begin;
    for (int32_t c = begin + region_ - 1; c >= begin; --c) {
        if (cells_[c].pos >= 0) {
            end = c + 1;
            break;
        }
    }
    used_end_[region] = end;
}

void KvCells::update_all_used_ends() {
    for (size_t r = 0; r < used_end_.size(); ++r) update_used_end((int32_t) r);
}

}  // namespace llama_tp
