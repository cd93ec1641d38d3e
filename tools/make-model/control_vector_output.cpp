#include "tools/make-model/control_vector_output.h"

#include "tools/make-model/atomic_file.h"
#include "tools/make-model/gguf_output.h"
#include "tools/make-model/model_spec.h"
#include "tools/make-model/tensor_data.h"

#include <memory>
#include <vector>

#include "ggml.h"
#include "gguf.h"

namespace llama_tp::make_model {
namespace {

struct GgmlContextDeleter {
    void operator()(ggml_context * ctx) const { ggml_free(ctx); }
};

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

    ggml_init_params tp = {plans.size() * ggml_tensor_overhead(), nullptr, /*no_alloc =*/true};
    const std::unique_ptr<ggml_context, GgmlContextDeleter> tensors(ggml_init(tp));
    for (const TensorPlan & p : plans) {
        ggml_tensor * t = ggml_new_tensor(tensors.get(), p.type, (int) p.ne.size(), p.ne.data());
        ggml_set_name(t, p.name.c_str());
        gguf_add_tensor(out.get(), t);
    }
    AtomicFile file(path);
    std::vector<char> header(gguf_get_meta_size(out.get()));
    gguf_get_meta_data(out.get(), header.data());
    file.write(header.data(), header.size());
    const TensorDataGenerator generator(spec.seed, 1);
    const size_t alignment = gguf_get_alignment(out.get());
    for (const TensorPlan & p : plans) {
        size_t size = 0;
        generator.generate(p, [&](const void * data, size_t n) {
            file.write(data, n);
            size += n;
        });
        file.write_zeros(GGML_PAD(size, alignment) - size);
    }
    file.commit();
    return ControlVectorResult{(int64_t) plans.size(), n_embd};
}

}  // namespace llama_tp::make_model
