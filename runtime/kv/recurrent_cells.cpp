#include "runtime/kv/recurrent_cells.h"

#include <algorithm>

namespace llama_tp {

namespace {

// One sequence's tokens in a batch: [t0, t0 + n).
struct Segment {
    int32_t seq, t0, n;
};

bool fail(std::string * why, const std::string & message) {
    if (why) *why = message;
    return false;
}

}  // namespace

bool RecurrentCells::place(const Batch & batch, StatePlacement & out, std::string * why) {
    out = StatePlacement{};
    std::vector<Segment> segments;
    std::vector<bool> seen(next_.size(), false);
    for (int32_t i = 0; i < batch.size();) {
        const int32_t seq = batch.seq[i];
        int32_t n = 1;
        while (i + n < batch.size() && batch.seq[i + n] == seq) ++n;
        if (seq < 0 || seq >= n_seq_max()) return fail(why, "sequence " + std::to_string(seq) + " out of range");
        if (seen[seq]) {
            return fail(why, "the tokens of sequence " + std::to_string(seq) +
                                 " are not consecutive in the batch, which linear attention needs");
        }
        seen[seq] = true;
        const int32_t from = next_[seq] == kLost ? 0 : next_[seq];
        for (int32_t j = 0; j < n; ++j) {
            if (batch.pos[i + j] != from + j) {
                return fail(why,
                            "sequence " + std::to_string(seq) + " goes on at position " +
                                std::to_string(batch.pos[i + j] - j) + " but its recurrent state " +
                                (next_[seq] == kLost ? std::string("was lost (it must start again at 0)")
                                                     : "has taken in positions [0, " + std::to_string(from) + ")"));
            }
        }
        segments.push_back({seq, i, n});
        i += n;
    }
    // Neighbouring sequences of as many tokens each share one run.
    for (const Segment & s : segments) {
        StateRun * last = out.runs.empty() ? nullptr : &out.runs.back();
        if (last && last->n_tokens == s.n && last->t0 + last->size() == s.t0) {
            last->n_seqs++;
        } else {
            out.runs.push_back({s.t0, s.n, 1, (int32_t) out.rows.size()});
        }
        out.rows.push_back(s.seq);
        out.keep.push_back(next_[s.seq] > 0 ? 1.0f : 0.0f);
        out.before.push_back({s.seq, next_[s.seq]});
        next_[s.seq] = (next_[s.seq] == kLost ? 0 : next_[s.seq]) + s.n;
    }
    return true;
}

void RecurrentCells::unplace(const StatePlacement & placement, bool stepped) {
    for (const auto & [seq, next] : placement.before) next_[seq] = stepped ? kLost : next;
}

std::pair<int32_t, int32_t> RecurrentCells::seq_remove(int32_t seq, int32_t p0, int32_t p1) {
    const std::pair<int32_t, int32_t> none{-1, -1};
    if (seq < 0 || seq >= n_seq_max()) return none;
    p0 = std::max(p0, 0);
    if (p1 >= 0 && p1 <= p0) return none;  // nothing
    int32_t & next = next_[seq];
    if (p0 > 0 && p1 < 0 && saved(seq) == p0 && (next == kLost || next > p0)) {
        next = p0;
        return {n_seq_max() + seq, seq};
    }
    // What the second row holds no longer precedes what the sequence goes on with.
    if (saved(seq) != kLost && p0 < saved(seq)) saved_[seq] = kLost;
    if (next == kLost) {
        if (p0 <= 0 && p1 < 0) next = 0;
        return none;
    }
    if (p0 >= next) return none;
    next = p0 == 0 && (p1 < 0 || p1 >= next) ? 0 : kLost;
    return none;
}

std::pair<int32_t, int32_t> RecurrentCells::save(int32_t seq) {
    if (seq < 0 || seq >= (int32_t) saved_.size() || next_[seq] == kLost) return {-1, -1};
    saved_[seq] = next_[seq];
    return {seq, n_seq_max() + seq};
}

void RecurrentCells::seq_shift(int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    if (seq < 0 || seq >= n_seq_max()) return;
    p0 = std::max(p0, 0);
    if (seq < (int32_t) saved_.size()) saved_[seq] = kLost;
    int32_t & next = next_[seq];
    if (next <= 0 || p0 >= next || delta == 0 || (p1 >= 0 && p1 <= p0)) return;
    const bool tail = p1 < 0 || p1 >= next;
    next = tail && p0 + delta >= 0 && next + delta > 0 ? next + delta : kLost;
}

bool RecurrentCells::copy_fits(int32_t src, int32_t seq, int32_t p0, int32_t p1) const {
    if (src < 0 || src >= n_seq_max() || seq < 0 || seq >= n_seq_max()) return false;
    return p0 <= 0 && next_[src] != kLost && (p1 < 0 || p1 >= next_[src]) && next_[seq] <= 0;
}

void RecurrentCells::seq_copy(int32_t src, int32_t seq) {
    next_[seq] = next_[src];
    if (seq < (int32_t) saved_.size()) saved_[seq] = kLost;
}

}  // namespace llama_tp
