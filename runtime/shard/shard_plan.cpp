#include "runtime/shard/shard_plan.h"

#include "runtime/error.h"
#include "runtime/shard/axis.h"
#include "runtime/model/gguf_file.h"

#include <algorithm>
#include <iterator>
#include <numeric>
#include <optional>
#include <set>

#include "ggml.h"

namespace llama_tp {

namespace {

// "0, 3, 6, 12" for the message of a split that misses the grid.
std::string grid_string(const std::vector<int64_t> & grid) {
    std::string out;
    for (size_t i = 0; i + 1 < grid.size(); ++i) out += (i ? ", " : "") + std::to_string(grid[i]);
    return out;
}

constexpr int64_t kRowTile = ShardPlan::kRowTile;

// ggml multiplies float matrices of a multiple of 4 rows with its tiled
// kernel (llamafile's) and others with its own, which adds in another order:
// a slice is multiplied as the whole head only where both take the same one.
bool same_float_kernel(int64_t slice_rows, int64_t whole_rows) {
    return (slice_rows % 4 == 0) == (whole_rows % 4 == 0);
}

// Vocabulary slices of multiples of 64 rows where the vocabulary is (and of
// its largest power-of-two divisor up to 64 otherwise): ggml's kernels then
// run the same tiles over each slice as over the whole head. A vocabulary
// of no multiple of 4 rows (GPT-2's 50257) is split in slices of no multiple
// of 4 either, each boundary moved by a row or two where needed.
std::vector<ShardRange> vocab_slices(int64_t n_vocab, const std::vector<float> & weights) {
    const std::string what = "the output head vocabulary";
    if (n_vocab % 4 == 0) return Axis{n_vocab, std::gcd(n_vocab, 4 * kRowTile), what}.split(weights);
    std::vector<ShardRange> slices = Axis{n_vocab, 1, what}.split(weights);
    if (slices.size() < 2) return slices;
    auto move_end = [&](size_t r, int64_t rows) { slices[r].end = slices[r + 1].begin = slices[r].end + rows; };
    for (size_t r = 0; r + 1 < slices.size(); ++r) {
        while (slices[r].size() % 4 == 0) move_end(r, 1);
    }
    // The last slice takes what is left: where that is a multiple of 4, the
    // boundary before it moves by 1, or by 2 where 1 would give the slice
    // before it a multiple of 4.
    const size_t last = slices.size() - 1;
    if (slices[last].size() % 4 == 0) move_end(last - 1, (slices[last - 1].size() + 1) % 4 == 0 ? 2 : 1);
    for (const ShardRange & slice : slices) {
        if (slice.size() <= 0) throw Error("cannot split " + what + " of " + std::to_string(n_vocab) + " rows");
    }
    return slices;
}

// Every axis a model's split divides, for n_ranks ranks.
struct Axes {
    Axis heads;
    std::vector<Axis> ff;          // one per distinct dense FFN width
    std::vector<int> ff_of_layer;  // index into ff (-1: no dense FFN)
    std::optional<Axis> ff_exp;    // the experts' width
    std::optional<Axis> delta;     // linear attention's key heads
};

Axes model_axes(const GgufFile & file, const HParams & hp, int64_t n_ranks) {
    Axes a{attention_head_axis(file, hp, n_ranks), {}, std::vector<int>(hp.n_layer, -1), std::nullopt, std::nullopt};
    auto dense = [&](int il) { return hp.block(il).ffn.has_dense(); };
    auto experts = [&](int il) { return hp.block(il).ffn.has_experts(); };
    // One axis per width and tensor name (a shared expert's are *_shexp).
    std::vector<std::pair<int64_t, std::string>> widths;
    for (int il = 0; il < hp.n_layer; ++il) {
        if (!dense(il)) continue;
        const std::pair<int64_t, std::string> w{hp.layer(il).n_ff, hp.block(il).ffn.dense_suffix()};
        auto at = std::find(widths.begin(), widths.end(), w);
        a.ff_of_layer[il] = (int) (at - widths.begin());
        if (at == widths.end()) widths.push_back(w);
    }
    for (const auto & [w, suffix] : widths) {
        a.ff.push_back(ffn_width_axis(file, hp, w, "ffn_down" + suffix + ".weight", n_ranks, [&](int il) {
            return dense(il) && hp.layer(il).n_ff == w && suffix == hp.block(il).ffn.dense_suffix();
        }));
    }
    if (hp.is_moe()) a.ff_exp = ffn_width_axis(file, hp, hp.n_ff_exp, "ffn_down_exps.weight", n_ranks, experts);
    if (hp.recurrent()) a.delta = delta_net_head_axis(file, hp);
    return a;
}

// The degrees whose even splits make the reduction grid.
constexpr int kGridDegrees[] = {2, 3, 4, 8};

// Grid boundaries of one axis: its ends and every boundary of the model's
// even splits into kGridDegrees ranks (those it can take). The axis is
// rebuilt per degree: its unit may depend on the number of ranks.
template <typename AxisOf>
std::vector<int64_t> reduction_grid(int64_t extent, const AxisOf & axis_of) {
    std::set<int64_t> grid{0, extent};
    for (int degree : kGridDegrees) {
        try {
            for (const ShardRange & r : axis_of(degree).split(std::vector<float>(degree, 1.0f))) grid.insert(r.begin);
        } catch (const Error &) {
            // A degree the model cannot take adds no boundaries.
        }
    }
    return {grid.begin(), grid.end()};
}

// Moves every boundary between ranks to the nearest grid boundary (the lower
// one on a tie); throws when two ranks' boundaries meet.
void snap_to_grid(std::vector<ShardRange> & ranges, const std::vector<int64_t> & grid, const std::string & what) {
    for (size_t r = 1; r < ranges.size(); ++r) {
        const int64_t b = ranges[r].begin;
        auto above = std::lower_bound(grid.begin(), grid.end(), b);
        int64_t snapped = *above;
        if (above != grid.begin() && b - *std::prev(above) <= *above - b) snapped = *std::prev(above);
        ranges[r - 1].end = ranges[r].begin = snapped;
    }
    for (size_t r = 0; r < ranges.size(); ++r) {
        if (ranges[r].size() <= 0) {
            throw Error("cannot split " + what + " across " + std::to_string(ranges.size()) +
                        " ranks with split-invariant sums: rank " + std::to_string(r) +
                        " gets nothing on the reduction grid (its cells start at " + grid_string(grid) +
                        "); choose a split closer to an even one");
        }
    }
}

// The grid cells inside one rank's range.
std::vector<ShardRange> pieces_of(const ShardRange & range, const std::vector<int64_t> & grid) {
    std::vector<ShardRange> pieces;
    for (size_t i = 0; i + 1 < grid.size(); ++i) {
        if (grid[i] >= range.begin && grid[i + 1] <= range.end) pieces.push_back({grid[i], grid[i + 1]});
    }
    return pieces;
}

// An axis's ranges for every rank, each with its pieces: with split-invariant
// sums the boundaries snapped to the reduction grid and the pieces its cells.
struct SplitAxis {
    std::vector<ShardRange> ranges;
    std::vector<std::vector<ShardRange>> pieces;
};

template <typename AxisOf>
SplitAxis split_axis(const AxisOf & axis_of, const std::vector<float> & weights, bool split_invariant,
                     const std::string & what) {
    const Axis axis = axis_of((int64_t) weights.size());
    SplitAxis s{axis.split(weights), {}};
    if (!split_invariant) {
        for (const ShardRange & r : s.ranges) s.pieces.push_back({r});
        return s;
    }
    const std::vector<int64_t> grid = reduction_grid(axis.extent, axis_of);
    snap_to_grid(s.ranges, grid, what);
    for (const ShardRange & r : s.ranges) s.pieces.push_back(pieces_of(r, grid));
    return s;
}

}  // namespace

ShardPlan ShardPlan::plan(const GgufFile & file, const HParams & hp, int n_ranks, const std::vector<float> & weights_in,
                          bool split_invariant) {
    if (n_ranks < 1) throw Error("the tensor-parallel degree must be at least 1");
    std::vector<float> weights = weights_in;
    if (weights.empty()) weights.assign(n_ranks, 1.0f);
    if ((int) weights.size() != n_ranks) {
        throw Error("--tensor-split has " + std::to_string(weights.size()) + " values but --tp is " +
                    std::to_string(n_ranks));
    }
    ShardPlan p;
    p.n_ranks = n_ranks;
    p.ranks.resize(n_ranks);
    const Axes axes = model_axes(file, hp, n_ranks);
    const SplitAxis heads = split_axis([&](int64_t n) { return model_axes(file, hp, n).heads; }, weights,
                                       split_invariant, "the attention heads");
    std::vector<SplitAxis> ff;
    for (size_t i = 0; i < axes.ff.size(); ++i) {
        ff.push_back(split_axis([&](int64_t n) { return model_axes(file, hp, n).ff[i]; }, weights, split_invariant,
                                "the FFN width"));
    }
    std::optional<SplitAxis> ff_exp;
    if (axes.ff_exp) {
        ff_exp = split_axis([&](int64_t n) { return *model_axes(file, hp, n).ff_exp; }, weights, split_invariant,
                            "the experts' FFN width");
    }
    std::optional<SplitAxis> delta;
    if (axes.delta) {
        delta = split_axis([&](int64_t n) { return *model_axes(file, hp, n).delta; }, weights, split_invariant,
                           "the linear attention's key heads");
    }
    size_t delta_cells = 0;
    if (delta) {
        for (const auto & pieces : delta->pieces) delta_cells += pieces.size() * (size_t) hp.delta.value_blocks();
    }
    const auto vocab = vocab_slices(hp.n_vocab, weights);
    for (int r = 0; r < n_ranks; ++r) {
        RankShard & s = p.ranks[r];
        s.q_heads = heads.ranges[r];
        s.o_pieces = heads.pieces[r];
        s.vocab = vocab[r];
        if (delta) {
            s.delta_heads = delta->ranges[r];
            s.delta_cells = delta_cells;
            // ssm_out's columns: each key-head cell's value heads, once per
            // block of them, in the order the rank stacks its value heads.
            for (int32_t b = 0; b < hp.delta.value_blocks(); ++b) {
                for (const ShardRange & c : delta->pieces[r]) {
                    s.delta_pieces.push_back(delta_net_value_heads(hp.delta, c)[b]);
                }
            }
        }
        s.layers.resize(hp.n_layer);
        for (int il = 0; il < hp.n_layer; ++il) {
            LayerShard & l = s.layers[il];
            if (hp.keeps_kv(il)) l.kv_heads = attention_kv_heads(hp, il, s.q_heads, r, n_ranks);
            if (axes.ff_of_layer[il] >= 0) {
                const SplitAxis & f = ff[axes.ff_of_layer[il]];
                l.ff = {f.ranges[r], f.pieces[r]};
            }
            if (ff_exp && hp.block(il).ffn.has_experts()) l.ff_exp = {ff_exp->ranges[r], ff_exp->pieces[r]};
        }
    }
    return p;
}

size_t RankShard::max_pieces() const {
    size_t n = 0;
    for (const LayerShard & l : layers) {
        n = std::max(n, std::max(o_pieces.size(), delta_pieces.size()) + l.ff.pieces.size() + l.ff_exp.pieces.size());
    }
    return n;
}

ShardRange RankShard::first_kv_heads() const {
    for (const LayerShard & l : layers) {
        if (l.kv_heads.size() > 0) return l.kv_heads;
    }
    return {};
}

bool ShardPlan::tiled(const HParams & hp) const {
    auto on_tiles = [](int64_t rows) { return rows % kRowTile == 0; };
    for (const RankShard & s : ranks) {
        if (!same_float_kernel(s.vocab.size(), hp.n_vocab)) return false;
    }
    for (int r = 1; r < n_ranks; ++r) {
        const RankShard & s = ranks[r];
        for (int il = 0; il < hp.n_layer; ++il) {
            const LayerShard & l = s.layers[il];
            const int64_t hd = hp.layer(il).head_dim;
            // Linear attention's slices start at its key heads' channels (or
            // their blocks of ssm_in) and, in every block of value heads, at
            // their value heads'.
            const DeltaNetShape & d = hp.delta;
            bool delta_tiled = on_tiles(s.delta_heads.begin * (d.fused_qkvz ? d.qkvz_group() : d.head_k_dim));
            for (const ShardRange & v : delta_net_value_heads(d, s.delta_heads)) {
                delta_tiled = delta_tiled && on_tiles(v.begin * d.head_v_dim);
            }
            if (!on_tiles(s.q_heads.begin * hd) || !delta_tiled || !on_tiles(l.kv_heads.begin * hd) ||
                !on_tiles(l.ff.width.begin) || !on_tiles(l.ff_exp.width.begin)) {
                return false;
            }
        }
    }
    return true;
}

std::string ShardPlan::describe() const {
    std::string out;
    for (int r = 0; r < n_ranks; ++r) {
        const RankShard & s = ranks[r];
        const LayerShard & l = s.layers.front();
        out += "rank " + std::to_string(r) + ": heads " + std::to_string(s.q_heads.size()) + " (kv " +
               std::to_string(s.first_kv_heads().size()) + ")" +
               (s.delta_heads.size() ? ", linear key heads " + std::to_string(s.delta_heads.size()) : "") + ", ffn " +
               std::to_string(l.ff.width.size() ? l.ff.width.size() : l.ff_exp.width.size()) + ", vocab " +
               std::to_string(s.vocab.size()) + (r + 1 < n_ranks ? "; " : "");
    }
    return out;
}

}  // namespace llama_tp
