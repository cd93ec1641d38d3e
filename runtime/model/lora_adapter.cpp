// LoRA adapters: each pair is split as the matrix it changes, decided by the
// slices that matrix was read with (one fact: the shard plan's).

#include "runtime/error.h"
#include "runtime/model/gguf_file.h"
#include "runtime/model/hparams.h"
#include "runtime/model/weights.h"

#include <string>

#include "ggml.h"

namespace llama_tp {

namespace {

// A matrix LoRA may change: column-parallel (split by output rows, or
// whole) or row-parallel (split by input columns, cell by cell).
struct LoraTarget {
    ggml_tensor * column = nullptr;
    const RowParallelWeight * row = nullptr;
};

std::string shape_of(const ggml_tensor * t) {
    std::string s = "[" + std::to_string(t->ne[0]) + ", " + std::to_string(t->ne[1]);
    if (t->ne[2] > 1) s += ", " + std::to_string(t->ne[2]);
    return s + "]";
}

// File matrices the architecture's graph does not read, here or upstream:
// an adapter's pairs for them change nothing and are passed over.
bool unread(const HParams & hp, const std::string & base) {
    if (hp.head_is_embedding && base == "output.weight") return true;
    // Layers sharing an earlier layer's cache project no keys or values.
    for (int il = hp.n_layer_kv(); il < hp.n_layer; ++il) {
        const std::string p = hp.tensor_prefix(il);
        if (base == p + "attn_k.weight" || base == p + "attn_v.weight") return true;
    }
    return false;
}

bool strip_suffix(std::string & s, const std::string & suffix) {
    if (s.size() <= suffix.size() || s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
    s.resize(s.size() - suffix.size());
    return true;
}

}  // namespace

void ModelWeights::declare_adapter(const GgufFile & f, const GgufFile & model, const HParams & hp) {
    auto fail = [&](const std::string & why) { throw Error("LoRA adapter '" + f.path() + "': " + why); };
    if (f.get_string("general.type", "") != "adapter") fail("general.type is not 'adapter' (is it a model?)");
    if (f.get_string("adapter.type", "") != "lora") fail("adapter.type is not 'lora'");
    const std::string arch = f.get_string("general.architecture", "");
    if (arch != hp.arch_name) fail("made for architecture '" + arch + "', the model is '" + hp.arch_name + "'");
    if (f.has_key("adapter.alora.invocation_tokens")) fail("activated LoRA (aLoRA) is not supported");

    std::map<std::string, LoraTarget> targets;
    auto column = [&](ggml_tensor * t) {
        if (t) targets[parts_of(t).front().name].column = t;
    };
    auto row = [&](const RowParallelWeight & w) {
        if (!w.pieces.empty()) targets[parts_of(w.pieces.front()).front().name].row = &w;
    };
    for (LayerWeights & l : layers) {
        for (ggml_tensor * t :
             {l.wq, l.wk, l.wv, l.wqkv, l.ffn_gate, l.ffn_up, l.ffn_gate_up, l.ffn_gate_exps, l.ffn_up_exps,
              l.ffn_gate_up_exps, l.ssm_qkv, l.ssm_gate, l.ssm_qkvz, l.ssm_alpha, l.ssm_beta, l.ssm_ba}) {
            column(t);
        }
        row(l.wo);
        row(l.ssm_out);
        row(l.ffn_down);
        row(l.ffn_down_exps);
    }
    column(output);  // a tied head has none: its adapter tensors name a matrix the model lacks

    // Every tensor is half of a pair whose matrix the model has and llama-tp changes.
    std::map<std::string, int> halves;
    for (int64_t i = 0; i < f.n_tensors(); ++i) {
        std::string base = ggml_get_name(f.tensor_at(i));
        const std::string name = base;
        if (!strip_suffix(base, ".lora_a") && !strip_suffix(base, ".lora_b")) {
            fail("tensor '" + name + "' is not a lora_a or lora_b half");
        }
        if (!model.find_tensor(base)) fail("tensor '" + name + "' changes '" + base + "', which the model lacks");
        if (unread(hp, base)) continue;
        if (!targets.count(base)) {
            fail("tensor '" + name + "' changes '" + base +
                 "'; llama-tp applies LoRA to the attention projections (linear attention's too), the FFN "
                 "projections (experts' too) and the output head only");
        }
        ++halves[base];
    }

    // The model's parameter count leaves adapters out, as upstream's does.
    const int64_t n_params = n_params_;
    LoraAdapter adapter;
    adapter.alpha = (float) f.get_float("adapter.lora.alpha", 0.0);
    const int index = (int) loras.size();
    for (const auto & [base, n] : halves) {
        const ggml_tensor * a_desc = f.find_tensor(base + ".lora_a");
        const ggml_tensor * b_desc = f.find_tensor(base + ".lora_b");
        if (n != 2 || !a_desc || !b_desc) fail("'" + base + "' lacks its lora_a or lora_b");
        const ggml_tensor * w = model.find_tensor(base);
        // Stacked experts: a pair per expert, stacked the same way.
        const int64_t in = w->ne[0], out = w->ne[1], n_exp = w->ne[2], r = a_desc->ne[1];
        if (a_desc->ne[0] != in || b_desc->ne[0] != r || b_desc->ne[1] != out || a_desc->ne[2] != n_exp ||
            b_desc->ne[2] != n_exp || a_desc->ne[3] != 1 || b_desc->ne[3] != 1) {
            const std::string experts = n_exp > 1 ? ", " + std::to_string(n_exp) : "";
            fail("'" + base + "' is " + shape_of(w) + " but its lora_a is " + shape_of(a_desc) + " and lora_b " +
                 shape_of(b_desc) + " (expected [" + std::to_string(in) + ", rank" + experts + "] and [rank, " +
                 std::to_string(out) + experts + "]; another base model?)");
        }
        LoraWeight lw;
        const LoraTarget & target = targets.at(base);
        std::vector<int64_t> a_shape = {in, r}, b_shape = {r, out};
        if (n_exp > 1) {
            a_shape.push_back(n_exp);
            b_shape.push_back(n_exp);
        }
        if (target.column) {
            // B takes the matrix's rows (all its parts, for a fused one).
            lw.a.pieces = {declare(f, base + ".lora_a", a_shape, false)};
            lw.a.cell_bounds = {0, in};
            std::vector<TensorSlice> rows;
            for (const Part & p : parts_of(target.column)) rows.push_back(p.slice);
            lw.b = rows.front().axis == TensorSlice::Whole ? declare(f, base + ".lora_b", b_shape, false)
                                                           : declare_rows(f, base + ".lora_b", b_shape, rows, false);
        } else {
            // A takes the matrix's columns, one tensor per cell of the grid.
            const RowParallelWeight & m = *target.row;
            lw.a.cell_bounds = m.cell_bounds;
            if (m.one_pass) {
                const TensorSlice s = parts_of(m.pieces.front()).front().slice;
                const int64_t begin = s.axis == TensorSlice::Columns ? s.begin : 0;
                for (size_t c = 0; c + 1 < m.cell_bounds.size(); ++c) {
                    const TensorSlice cell{TensorSlice::Columns, begin + m.cell_bounds[c],
                                           begin + m.cell_bounds[c + 1]};
                    lw.a.pieces.push_back(declare(f, base + ".lora_a", a_shape, false, cell));
                }
            } else {
                // Every column range of each piece (linear attention's
                // ssm_out holds several, one per run of the rank's heads).
                for (ggml_tensor * piece : m.pieces) {
                    std::vector<TensorSlice> ranges;
                    for (const Part & part : parts_of(piece)) ranges.push_back(part.slice);
                    lw.a.pieces.push_back(declare_cols(f, base + ".lora_a", a_shape, ranges, false));
                }
            }
            lw.b = declare(f, base + ".lora_b", b_shape, false);
        }
        lw.scale = -1;
        for (size_t k = 0; k < lora_scales.size(); ++k) {
            if (lora_scales[k].adapter == index && lora_scales[k].rank == r) lw.scale = (int) k;
        }
        if (lw.scale < 0) {
            lw.scale = (int) lora_scales.size();
            lora_scales.push_back({index, r});
        }
        adapter.weights[target.column ? target.column : target.row->pieces.front()] = lw;
    }
    loras.push_back(std::move(adapter));
    n_params_ = n_params;
}

}  // namespace llama_tp
