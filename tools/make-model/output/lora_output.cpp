#include "tools/make-model/output/lora_output.h"

#include "tools/make-model/output/gguf_output.h"
#include "tools/make-model/spec/model_spec.h"

#include <cmath>
#include <memory>
#include <regex>
#include <vector>

#include "gguf.h"

namespace llama_tp::make_model {
namespace {

struct GgmlContextDeleter {
    void operator()(ggml_context * ctx) const { ggml_free(ctx); }
};

// The matrices llama-tp applies LoRA to, as upstream names them: attention's
// (linear attention's too), the FFN's (experts' and shared experts'), the head.
bool adaptable(const std::string & name) {
    static const std::regex pattern(
        R"((blk\.[0-9]+\.(attn_(q|k|v|qkv|gate|output)|ssm_(in|ba|alpha|beta|out)|ffn_(gate|up|down)(_exps|_shexp)?|)"
        R"(ffn_gate_up_exps)|output)\.weight)");
    return std::regex_match(name, pattern);
}

// Quantized halves need whole blocks in a row; others fall back to F32.
ggml_type storage_type(ggml_type wanted, int64_t row_length) {
    return row_length % ggml_blck_size(wanted) == 0 ? wanted : GGML_TYPE_F32;
}

// One half of a pair; stacked experts (n_exp > 1) get one per expert.
TensorPlan half(const std::string & name, int64_t row_length, int64_t n_rows, int64_t n_exp, ggml_type type,
                float stddev) {
    TensorPlan p;
    p.name = name;
    p.ne = {row_length, n_rows};
    if (n_exp > 1) p.ne.push_back(n_exp);
    p.type = storage_type(type, row_length);
    p.stddev = stddev;
    return p;
}

}  // namespace

LoraResult write_lora_adapter(const std::string & path, const LoraSpec & spec, int n_threads) {
    ggml_context * meta = nullptr;
    gguf_init_params params = {};
    params.no_alloc = true;
    params.ctx = &meta;
    const GgufPtr base(gguf_init_from_file(spec.base_path.c_str(), params));
    if (!base) throw IoError("cannot read model file '" + spec.base_path + "'");
    const std::unique_ptr<ggml_context, GgmlContextDeleter> base_tensors(meta);
    const int64_t arch_id = gguf_find_key(base.get(), "general.architecture");
    if (arch_id < 0) throw IoError("model file '" + spec.base_path + "' has no general.architecture");

    // A scales the input to about unit size, B keeps the change about a
    // tenth of the product's: greedy answers move, the model stays peaked.
    std::vector<TensorPlan> plans;
    for (ggml_tensor * t = ggml_get_first_tensor(meta); t; t = ggml_get_next_tensor(meta, t)) {
        if (!adaptable(ggml_get_name(t)) || ggml_n_dims(t) < 2) continue;
        const std::string name = ggml_get_name(t);
        plans.push_back(
            half(name + ".lora_a", t->ne[0], spec.rank, t->ne[2], spec.type, 1.0f / std::sqrt((float) t->ne[0])));
        plans.push_back(
            half(name + ".lora_b", spec.rank, t->ne[1], t->ne[2], spec.type, 0.1f / std::sqrt((float) spec.rank)));
    }
    if (plans.empty()) throw UsageError("model file '" + spec.base_path + "' has no matrix LoRA adapts");

    const GgufPtr out(gguf_init_empty());
    gguf_set_val_str(out.get(), "general.architecture", gguf_get_val_str(base.get(), arch_id));
    gguf_set_val_str(out.get(), "general.type", "adapter");
    gguf_set_val_str(out.get(), "adapter.type", "lora");
    gguf_set_val_f32(out.get(), "adapter.lora.alpha", spec.alpha > 0.0f ? spec.alpha : 2.0f * (float) spec.rank);

    return LoraResult{plans.size() / 2, write_planned_file(path, out.get(), plans, spec.seed, n_threads)};
}

}  // namespace llama_tp::make_model
