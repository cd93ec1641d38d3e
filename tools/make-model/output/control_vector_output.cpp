#include "tools/make-model/output/control_vector_output.h"

#include "tools/make-model/output/gguf_output.h"
#include "tools/make-model/spec/model_spec.h"

#include <vector>

#include "ggml.h"
#include "gguf.h"

namespace llama_tp::make_model {
namespace {

int64_t model_int(const gguf_context * g, const std::string & key, const std::string & path) {
    const int64_t id = gguf_find_key(g, key.c_str());
    if (id < 0) throw IoError("model file '" + path + "' has no " + key);
    switch (gguf_get_kv_type(g, id)) {
        case GGUF_TYPE_UINT32:
            return (int64_t) gguf_get_val_u32(g, id);
        case GGUF_TYPE_INT32:
            return (int64_t) gguf_get_val_i32(g, id);
        case GGUF_TYPE_UINT64:
            return (int64_t) gguf_get_val_u64(g, id);
        case GGUF_TYPE_INT64:
            return gguf_get_val_i64(g, id);
        default:
            throw IoError("model file '" + path + "': " + key + " is not an integer");
    }
}

}  // namespace

ControlVectorResult write_control_vector(const std::string & path, const ControlVectorSpec & spec) {
    gguf_init_params params = {};
    params.no_alloc = true;
    const GgufPtr base(gguf_init_from_file(spec.base_path.c_str(), params));
    if (!base) throw IoError("cannot read model file '" + spec.base_path + "'");
    const int64_t arch_id = gguf_find_key(base.get(), "general.architecture");
    if (arch_id < 0) throw IoError("model file '" + spec.base_path + "' has no general.architecture");
    const std::string arch = gguf_get_val_str(base.get(), arch_id);
    const int64_t n_embd = model_int(base.get(), arch + ".embedding_length", spec.base_path);
    const int64_t n_layer = model_int(base.get(), arch + ".block_count", spec.base_path);
    if (n_layer < 2) throw UsageError("model file '" + spec.base_path + "' has one layer: no layer takes a direction");

    std::vector<TensorPlan> plans;
    for (int64_t il = 1; il < n_layer; ++il) {
        TensorPlan p;
        p.name = "direction." + std::to_string(il);
        p.ne = {n_embd};
        p.type = GGML_TYPE_F32;
        p.stddev = spec.stddev;
        plans.push_back(p);
    }
    const GgufPtr out(gguf_init_empty());
    gguf_set_val_str(out.get(), "general.architecture", "controlvector");
    gguf_set_val_str(out.get(), "controlvector.model_hint", arch.c_str());
    gguf_set_val_i32(out.get(), "controlvector.layer_count", (int32_t) plans.size());

    write_planned_file(path, out.get(), plans, spec.seed, 1);
    return ControlVectorResult{(int64_t) plans.size(), n_embd};
}

}  // namespace llama_tp::make_model
