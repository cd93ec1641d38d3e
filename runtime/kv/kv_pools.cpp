#include "runtime/kv/kv_pools.h"

#include "runtime/model/hparams.h"
#include "runtime/ranks/step.h"

#include <algorithm>

namespace llama_tp {

namespace {

int32_t round_up(int32_t n, int32_t to) {
    return (n + to - 1) / to * to;
}

// The tokens of a batch that a window pool keeps: each sequence's last `keep`.
Batch window_tail(const Batch & batch, int32_t keep) {
    std::vector<int32_t> end;
    for (int i = 0; i < batch.size(); ++i) {
        if ((size_t) batch.seq[i] >= end.size()) end.resize(batch.seq[i] + 1, 0);
        end[batch.seq[i]] = std::max(end[batch.seq[i]], batch.pos[i] + 1);
    }
    Batch tail;
    for (int i = 0; i < batch.size(); ++i) {
        if (batch.pos[i] >= end[batch.seq[i]] - keep) tail.add(batch.tokens[i], batch.pos[i], batch.seq[i], false);
    }
    return tail;
}

}  // namespace

int32_t KvPoolSizes::window_cells_per_sequence(const HParams & hp, int32_t n_batch) {
    bool any_swa = false;
    for (int il = 0; il < hp.n_layer_kv(); ++il) any_swa |= hp.is_swa(il);
    if (hp.n_swa <= 0 || !any_swa) return 0;
    // A batch, the window before it, and the offset within a block that
    // packing keeps (< g).
    const int32_t g = KvCells::kWindowGranularity;
    return round_up(hp.n_swa - 1 + n_batch, g) + g;
}

KvPoolSizes KvPoolSizes::of(const HParams & hp, int32_t n_ctx, int32_t n_seq_max, bool unified, int32_t n_batch,
                            bool swa_full, bool whole_windows) {
    const int32_t g = KvCells::kWindowGranularity;
    if (whole_windows) {
        n_ctx = unified ? round_up(n_ctx, g) : round_up(n_ctx / n_seq_max, g) * n_seq_max;
    }
    KvPoolSizes s{n_ctx, n_seq_max, unified};
    s.recurrent = hp.recurrent();
    const int32_t per_sequence = window_cells_per_sequence(hp, n_batch);
    if (swa_full || per_sequence == 0) return s;
    const int32_t keep = hp.n_swa - 1;
    const int32_t cells = unified ? round_up(n_seq_max * keep + n_batch, g) + g : n_seq_max * per_sequence;
    if (cells >= n_ctx) return s;
    s.window_keep = keep;
    s.window_cells = cells;
    return s;
}

uint64_t KvPlacement::digest() const {
    std::vector<int64_t> all = cells;
    all.push_back(-1);
    all.insert(all.end(), window_cells.begin(), window_cells.end());
    // Where each sequence's state went on from: ranks that disagree would
    // add other sums without a word.
    for (const auto & [seq, next] : states.before) {
        all.push_back(-2);
        all.push_back(seq);
        all.push_back(next);
    }
    return placement_digest(all);
}

KvPools::KvPools(const KvPoolSizes & sizes)
    : sizes_(sizes),
      all_(sizes.n_cells, sizes.n_seq_max, sizes.unified),
      window_(sizes.windowed() ? sizes.window_cells : sizes.n_seq_max, sizes.n_seq_max, sizes.unified,
              std::max(0, sizes.window_keep)),
      states_(sizes.n_seq_max, sizes.recurrent && sizes.saved_states) {}

bool KvPools::place(const Batch & batch, KvPlacement & out, std::string * why, bool load) {
    out = KvPlacement{};
    if (states() && !states_.place(batch, out.states, why)) return false;
    if (!all_.place(batch, out.cells, why)) {
        states_.unplace(out.states);
        out = KvPlacement{};
        return false;
    }
    if (!window()) return true;
    const bool placed = load ? window_.place(window_tail(batch, window_.keep()), out.window_cells, why, &out.moves)
                             : window_.place(batch, out.window_cells, why, &out.moves);
    if (!placed) {
        all_.unplace(out.cells);
        states_.unplace(out.states);
        out = KvPlacement{};
    }
    return placed;
}

void KvPools::unplace(const KvPlacement & placement, bool stepped) {
    all_.unplace(placement.cells);
    if (window()) window_.unplace(placement.window_cells);
    if (states()) states_.unplace(placement.states, stepped);
}

std::pair<int32_t, int32_t> KvPools::seq_remove(int32_t seq, int32_t p0, int32_t p1) {
    all_.seq_remove(seq, p0, p1);
    if (window()) window_.seq_remove(seq, p0, p1);
    return states() ? states_.seq_remove(seq, p0, p1) : std::pair<int32_t, int32_t>{-1, -1};
}

KvShifted KvPools::seq_shift(int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    KvShifted out;
    out.cells = all_.seq_shift(seq, p0, p1, delta);
    if (window()) out.window_cells = window_.seq_shift(seq, p0, p1, delta);
    if (states()) states_.seq_shift(seq, p0, p1, delta);
    return out;
}

bool KvPools::seq_copy(int32_t src, int32_t seq, int32_t p0, int32_t p1, KvCopy & out) {
    out = KvCopy{};
    if (window() && !window_.copy_fits(src, seq, p0, p1)) return false;
    if (states() && !states_.copy_fits(src, seq, p0, p1)) return false;
    if (!all_.seq_copy(src, seq, p0, p1, out.cells)) return false;
    if (window()) window_.seq_copy(src, seq, p0, p1, out.window_cells, &out.moves);
    if (states()) {
        states_.seq_copy(src, seq);
        out.states = {src, seq};
    }
    return true;
}

bool KvPools::cells_of(int32_t seq, int32_t n, std::vector<int64_t> & cells,
                       std::vector<int64_t> & window_cells) const {
    window_cells.clear();
    if (!all_.cells_of(seq, n, cells)) return false;
    return !window() || window_.cells_of(seq, n, window_cells);
}

}  // namespace llama_tp
