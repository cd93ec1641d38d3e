#include "plugin/shard_plan.h"

#include "plugin/error.h"
#include "plugin/gguf_file.h"

#include <numeric>

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

}  // namespace

ShardPlan ShardPlan::plan(const GgufFile & file, const HParams & hp, int n_ranks,
                          const std::vector<float> & weights_in) {
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
    const int64_t group = hp.n_head / hp.n_head_kv;
    // Column slices of attn_output start at head boundaries, which must also
    // be quantization-block boundaries.
    const int64_t blk_o = block_of_layers(file, hp, "attn_output.weight");
    const int64_t heads_per_block = blk_o / std::gcd(blk_o, (int64_t) hp.head_dim);
    const int64_t head_unit = std::lcm(hp.n_head_kv >= n_ranks ? group : 1, heads_per_block);
    const auto q = plan_or_explain(hp.n_head, head_unit, weights,
                                   "attention heads (" + std::to_string(hp.n_head) + " heads in units of " +
                                       std::to_string(head_unit) + " for blk.*.attn_q.weight / attn_output.weight)");
    // Dense FFN: its width; MoE: every expert's width (each rank holds every expert).
    const std::string down = hp.is_moe() ? "ffn_down_exps.weight" : "ffn_down.weight";
    const int64_t width = hp.is_moe() ? hp.n_ff_exp : hp.n_ff;
    const int64_t blk_down = block_of_layers(file, hp, down);
    const auto ff = plan_or_explain(width, blk_down, weights,
                                    "the FFN width (" + std::to_string(width) + " in blocks of " +
                                        std::to_string(blk_down) + " for blk.*." + down + ")");
    const auto vocab = plan_or_explain(hp.n_vocab, 1, weights, "the output head vocabulary");
    for (int r = 0; r < n_ranks; ++r) {
        RankShard & s = p.ranks[r];
        s.q_heads = q[r];
        s.kv_heads = {q[r].begin / group, (q[r].end + group - 1) / group};
        // Attention maps local query head i to local KV head i / (local ratio):
        // right when the rank holds whole groups, or part of a single group.
        const bool whole_groups = q[r].begin % group == 0 && q[r].size() == s.kv_heads.size() * group;
        if (s.kv_heads.size() != 1 && !whole_groups) {
            throw Error("cannot split attention across " + std::to_string(n_ranks) + " ranks: rank " +
                        std::to_string(r) + " would hold query heads [" + std::to_string(q[r].begin) + ", " +
                        std::to_string(q[r].end) + ") that do not map evenly onto KV heads (" +
                        std::to_string(hp.n_head) + " query heads, " + std::to_string(hp.n_head_kv) +
                        " KV heads); choose a tensor-parallel degree that divides " + std::to_string(hp.n_head_kv) +
                        " or " + std::to_string(hp.n_head));
        }
        s.ff = ff[r];
        s.vocab = vocab[r];
    }
    return p;
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
