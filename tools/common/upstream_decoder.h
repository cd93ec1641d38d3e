#pragma once
// Upstream libllama's own decode over a model file: the reference our
// runtime is checked against and the peer our benchmarks run beside. Same
// decode/logits shape as llama_tp::Engine, so tools can drive either.

#include "runtime/batch.h"
#include "runtime/engine.h"
#include "runtime/kv/kv_cache.h"

#include <cstdint>
#include <string>
#include <vector>

struct llama_model;
struct llama_context;
struct llama_adapter_lora;
struct ggml_threadpool;

namespace llama_tp {

struct UpstreamOptions {
    std::string model_path;
    int32_t n_ctx = 4096;
    int32_t n_batch = 512;
    int32_t n_seq_max = 1;
    // One KV pool for all sequences (what llama-tp's compare runs against) or
    // one stream per sequence (llama-server's default).
    bool kv_unified = true;
    int32_t n_threads = 0;  // 0: all cores
    bool use_mmap = false;  // upstream decodes fastest from ordinary memory
    KvTypes kv_types;       // cache element types (-ctk / -ctv)
    // Sliding-window layers keep every cell (libllama's default; llama-server's is not to).
    bool swa_full = true;
    RopeOverrides rope;              // --rope-* / --yarn-*, as llama_context_params take them
    std::vector<LoraOptions> loras;  // applied to the context at their scales
    // Read by libcommon's loader, applied as llama-server applies them.
    std::vector<ControlVectorOptions> control_vectors;
    ControlVectorRange control_range;
    std::vector<MetadataOverride> metadata_overrides;  // as llama_model_params::kv_overrides
    DeviceOptions devices;                             // the whole model on the device llama-tp's rank 0 would take
};

class UpstreamDecoder {
  public:
    explicit UpstreamDecoder(const UpstreamOptions & options);
    ~UpstreamDecoder();
    UpstreamDecoder(const UpstreamDecoder &) = delete;
    UpstreamDecoder & operator=(const UpstreamDecoder &) = delete;

    void decode(const Batch & batch);
    const float * logits(int32_t batch_row) const;
    void seq_remove(int32_t seq, int32_t p0, int32_t p1);
    int32_t n_vocab() const;

  private:
    void apply_control_vectors(const UpstreamOptions & o);

    llama_model * model_ = nullptr;
    llama_context * ctx_ = nullptr;
    ggml_threadpool * threadpool_ = nullptr;
    std::vector<llama_adapter_lora *> loras_;
};

}  // namespace llama_tp
