#include "plugin/kv_cells.h"

#include "plugin/error.h"

#include <algorithm>
#include <cmath>

namespace llama_tp {

KvCells::KvCells(int32_t n_cells, int32_t n_seq_max, bool unified) : n_seq_max_(n_seq_max), unified_(unified) {
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

bool KvCells::place(const Batch & batch, std::vector<int64_t> & cells, std::string * why) {
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
        ggml_fp16_t * row = mask + (size_t) i * run.window;
        ggml_fp16_t * row_swa = mask_swa ? mask_swa + (size_t) i * run.window : nullptr;
        for (int32_t c = 0; c < run.window; ++c) {
            const bool seen = cells[c].pos >= 0 && cells[c].seq == seq && cells[c].pos <= pos;
            row[c] = seen ? zero : ninf;
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
                       std::vector<std::pair<int64_t, int64_t>> & copied) {
    copied.clear();
    if (src < 0 || src >= n_seq_max_ || seq < 0 || seq >= n_seq_max_ || src == seq) return false;
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
    cells.assign((size_t) std::max(0, n), -1);
    if (seq < 0 || seq >= n_seq_max_) return n <= 0;
    const int32_t r = region_of(seq);
    for (int32_t c = region_begin(r); c < region_begin(r) + region_; ++c) {
        const Cell & cell = cells_[c];
        if (cell.pos >= 0 && cell.seq == seq && cell.pos < n) cells[cell.pos] = c;
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
