#include "plugin/shard_plan.h"

#include "plugin/error.h"
#include "plugin/gguf_file.h"

#include <algorithm>
#include <iterator>
#include <numeric>
#include <set>

#include "ggml.h"

namespace llama_tp {

namespace {

// Quantization block of a tensor (1 for float types); 1 when absent.
int64_t block_of(const GgufFile & file, const std::string & name) {
    const ggml_tensor * t = file.find_tensor(name);
    return t ? ggml_blck_size(t->type) : 1;
}

// The largest block of any layer's copy of a tensor.
int64_t block_of_layers(const GgufFile & file, const HParams & hp, const std::string & suffix) {
    int64_t b = 1;
    for (int il = 0; il < hp.n_layer; ++il) {
        b = std::lcm(b, block_of(file, "blk." + std::to_string(il) + "." + suffix));
    }
    return b;
}

std::vector<ShardRange> plan_or_explain(int64_t extent, int64_t granularity, const std::vector<float> & weights,
                                        const std::string & what) {
    try {
        return plan_shards(extent, granularity, weights);
    } catch (const Error & e) {
        throw Error("cannot split " + what + " across " + std::to_string(weights.size()) + " ranks: " + e.what());
    }
}

// "0, 3, 6, 12" for the message of a split that misses the grid.
std::string grid_string(const std::vector<int64_t> & grid) {
    std::string out;
    for (size_t i = 0; i + 1 < grid.size(); ++i) out += (i ? ", " : "") + std::to_string(grid[i]);
    return out;
}

constexpr int64_t kRowTile = ShardPlan::kRowTile;

// The query-head and FFN-width ranges of a split into weights.size() ranks.
struct AxisSplit {
    std::vector<ShardRange> q, ff;
};

AxisSplit split_axes(const GgufFile & file, const HParams & hp, const std::vector<float> & weights) {
    const int64_t n_ranks = (int64_t) weights.size();
    const int64_t group = hp.n_head / hp.n_head_kv;
    // Column slices of attn_output start at head boundaries, which must also
    // be quantization-block boundaries.
    const int64_t blk_o = block_of_layers(file, hp, "attn_output.weight");
    const int64_t heads_per_block = blk_o / std::gcd(blk_o, (int64_t) hp.head_dim);
    const int64_t head_unit = std::lcm(hp.n_head_kv >= n_ranks ? group : 1, heads_per_block);
    AxisSplit s;
    s.q = plan_or_explain(hp.n_head, head_unit, weights,
                          "attention heads (" + std::to_string(hp.n_head) + " heads in units of " +
                              std::to_string(head_unit) + " for blk.*.attn_q.weight / attn_output.weight)");
    // Dense FFN: its width; MoE: every expert's width (each rank holds every expert).
    const std::string down = hp.is_moe() ? "ffn_down_exps.weight" : "ffn_down.weight";
    const int64_t width = hp.is_moe() ? hp.n_ff_exp : hp.n_ff;
    // Slices of whole 16-row tiles where the width allows (quantization blocks
    // are already): ggml's kernels then treat a slice of gate/up as they treat
    // the whole matrix, which split-invariant sums rely on.
    const int64_t blk = block_of_layers(file, hp, down), tiled = std::lcm(blk, kRowTile);
    const int64_t blk_down = width % tiled == 0 && width / tiled >= n_ranks ? tiled : blk;
    s.ff = plan_or_explain(width, blk_down, weights,
                           "the FFN width (" + std::to_string(width) + " in blocks of " + std::to_string(blk_down) +
                               " for blk.*." + down + ")");
    return s;
}

// The degrees whose even splits make the reduction grid.
constexpr int kGridDegrees[] = {2, 3, 4, 8};

// Grid boundaries of one axis: its ends and every boundary of the model's
// even splits into kGridDegrees ranks (those it can take).
struct ReductionGrid {
    std::vector<int64_t> q, ff;
};

ReductionGrid reduction_grid(const GgufFile & file, const HParams & hp) {
    const int64_t width = hp.is_moe() ? hp.n_ff_exp : hp.n_ff;
    std::set<int64_t> q{0, hp.n_head}, ff{0, width};
    for (int degree : kGridDegrees) {
        try {
            const AxisSplit s = split_axes(file, hp, std::vector<float>(degree, 1.0f));
            for (const ShardRange & r : s.q) q.insert(r.begin);
            for (const ShardRange & r : s.ff) ff.insert(r.begin);
        } catch (const Error &) {
            // A degree the model cannot take adds no boundaries.
        }
    }
    return {{q.begin(), q.end()}, {ff.begin(), ff.end()}};
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
    AxisSplit split = split_axes(file, hp, weights);
    ReductionGrid grid;
    if (split_invariant) {
        grid = reduction_grid(file, hp);
        snap_to_grid(split.q, grid.q, "the attention heads");
        snap_to_grid(split.ff, grid.ff, "the FFN width");
    }
    // Vocabulary slices start at multiples of 64 rows where the vocabulary
    // allows: ggml's matrix kernels then run the same tiles over each slice as
    // over the whole head (an f32 head split at row 10667 rounded its last
    // rows differently).
    const int64_t vocab_unit = std::gcd(hp.n_vocab, 4 * kRowTile);
    const auto vocab = plan_or_explain(hp.n_vocab, vocab_unit, weights, "the output head vocabulary");
    const int64_t group = hp.n_head / hp.n_head_kv;
    for (int r = 0; r < n_ranks; ++r) {
        RankShard & s = p.ranks[r];
        const ShardRange & q = split.q[r];
        s.q_heads = q;
        s.kv_heads = {q.begin / group, (q.end + group - 1) / group};
        // Attention maps local query head i to local KV head i / (local ratio):
        // right when the rank holds whole groups, or part of a single group.
        const bool whole_groups = q.begin % group == 0 && q.size() == s.kv_heads.size() * group;
        if (s.kv_heads.size() != 1 && !whole_groups) {
            throw Error("cannot split attention across " + std::to_string(n_ranks) + " ranks: rank " +
                        std::to_string(r) + " would hold query heads [" + std::to_string(q.begin) + ", " +
                        std::to_string(q.end) + ") that do not map evenly onto KV heads (" + std::to_string(hp.n_head) +
                        " query heads, " + std::to_string(hp.n_head_kv) +
                        " KV heads); choose a tensor-parallel degree that divides " + std::to_string(hp.n_head_kv) +
                        " or " + std::to_string(hp.n_head));
        }
        s.ff = split.ff[r];
        s.vocab = vocab[r];
        s.o_pieces = split_invariant ? pieces_of(s.q_heads, grid.q) : std::vector<ShardRange>{s.q_heads};
        s.ff_pieces = split_invariant ? pieces_of(s.ff, grid.ff) : std::vector<ShardRange>{s.ff};
    }
    return p;
}

bool ShardPlan::tiled(const HParams & hp) const {
    auto on_tiles = [](int64_t rows) { return rows % kRowTile == 0; };
    for (int r = 1; r < n_ranks; ++r) {
        const RankShard & s = ranks[r];
        if (!on_tiles(s.q_heads.begin * hp.head_dim) || !on_tiles(s.kv_heads.begin * hp.head_dim) ||
            !on_tiles(s.ff.begin) || !on_tiles(s.vocab.begin)) {
            return false;
        }
    }
    return true;
}

std::string ShardPlan::describe() const {
    std::string out;
    for (int r = 0; r < n_ranks; ++r) {
        const RankShard & s = ranks[r];
        out += "rank " + std::to_string(r) + ": heads " + std::to_string(s.q_heads.size()) + " (kv " +
               std::to_string(s.kv_heads.size()) + "), ffn " + std::to_string(s.ff.size()) + ", vocab " +
               std::to_string(s.vocab.size()) + (r + 1 < n_ranks ? "; " : "");
    }
    return out;
}

}  // namespace llama_tp
