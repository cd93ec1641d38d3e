#include "tools/common/upstream_decoder.h"

#include "runtime/error.h"
#include "runtime/text/tokenizer.h"

#include <algorithm>
#include <thread>

#include "common.h"
#include "ggml-cpu.h"
#include "llama.h"

namespace llama_tp {

UpstreamDecoder::UpstreamDecoder(const UpstreamOptions & o) {
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.load_mode = o.use_mmap ? LLAMA_LOAD_MODE_MMAP : LLAMA_LOAD_MODE_NONE;
    ggml_backend_dev_t devices[2] = {choose_rank_devices(o.devices, 1, 0, 0).devices[0], nullptr};
    if (ggml_backend_dev_type(devices[0]) == GGML_BACKEND_DEVICE_TYPE_CPU) {
        mp.n_gpu_layers = 0;
    } else {
        mp.devices = devices;
        mp.split_mode = LLAMA_SPLIT_MODE_NONE;
        mp.n_gpu_layers = -1;
    }
    const std::vector<llama_model_kv_override> kv = to_llama_overrides(o.metadata_overrides);
    if (!o.metadata_overrides.empty()) mp.kv_overrides = kv.data();
    model_ = llama_model_load_from_file(o.model_path.c_str(), mp);
    if (!model_) throw Error("upstream libllama could not load '" + o.model_path + "'");
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) o.n_ctx;
    cp.n_batch = (uint32_t) o.n_batch;
    cp.n_ubatch = (uint32_t) o.n_batch;
    cp.n_seq_max = (uint32_t) o.n_seq_max;
    const int32_t threads = o.n_threads > 0 ? o.n_threads : (int32_t) std::max(1u, std::thread::hardware_concurrency());
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.no_perf = true;
    cp.kv_unified = o.kv_unified;
    cp.swa_full = o.swa_full;
    cp.type_k = o.kv_types.k;
    cp.type_v = o.kv_types.v;
    if (o.rope.scaling) {
        cp.rope_scaling_type = *o.rope.scaling == RopeScaling::None     ? LLAMA_ROPE_SCALING_TYPE_NONE
                               : *o.rope.scaling == RopeScaling::Linear ? LLAMA_ROPE_SCALING_TYPE_LINEAR
                                                                        : LLAMA_ROPE_SCALING_TYPE_YARN;
    }
    cp.rope_freq_base = o.rope.freq_base;
    cp.rope_freq_scale = o.rope.freq_scale;
    cp.yarn_orig_ctx = (uint32_t) o.rope.yarn_orig_ctx;
    cp.yarn_ext_factor = o.rope.yarn_ext_factor;
    cp.yarn_attn_factor = o.rope.yarn_attn_factor;
    cp.yarn_beta_fast = o.rope.yarn_beta_fast;
    cp.yarn_beta_slow = o.rope.yarn_beta_slow;
    // Upstream stores a quantized V only with flash attention (as llama-server's -fa auto does).
    if (!o.kv_types.both_f16()) cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    ctx_ = llama_init_from_model(model_, cp);
    if (!ctx_) {
        llama_model_free(model_);
        throw Error("upstream libllama could not create a context for '" + o.model_path + "'");
    }
    // A persistent thread pool, as llama-bench and llama-server use (upstream's
    // best setting): without one every decode step starts its threads anew.
    ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
    threadpool_ = ggml_threadpool_new(&tpp);
    if (threadpool_) llama_attach_threadpool(ctx_, threadpool_, threadpool_);
    std::vector<float> scales;
    for (const LoraOptions & l : o.loras) {
        llama_adapter_lora * a = llama_adapter_lora_init(model_, l.path.c_str());
        if (!a) throw Error("upstream libllama could not load the LoRA adapter '" + l.path + "'");
        loras_.push_back(a);
        scales.push_back(l.scale);
    }
    if (!loras_.empty() && llama_set_adapters_lora(ctx_, loras_.data(), loras_.size(), scales.data()) != 0) {
        throw Error("upstream libllama could not apply the LoRA adapters");
    }
    if (!o.control_vectors.empty()) apply_control_vectors(o);
}

void UpstreamDecoder::apply_control_vectors(const UpstreamOptions & o) {
    std::vector<common_control_vector_load_info> infos;
    for (const ControlVectorOptions & c : o.control_vectors) infos.push_back({c.scale, c.path});
    const common_control_vector_data cv = common_control_vector_load(infos);
    if (cv.n_embd == -1) throw Error("upstream libcommon could not load the control vectors");
    const int32_t n_layer = llama_model_n_layer(model_);
    const int32_t first = o.control_range.first > 0 ? o.control_range.first : 1;
    const int32_t last = o.control_range.last > 0 ? o.control_range.last : n_layer;
    if (llama_set_adapter_cvec(ctx_, cv.data.data(), cv.data.size(), cv.n_embd, first, last) != 0) {
        throw Error("upstream libllama could not apply the control vectors");
    }
}

UpstreamDecoder::~UpstreamDecoder() {
    llama_free(ctx_);
    for (llama_adapter_lora * a : loras_) llama_adapter_lora_free(a);
    llama_model_free(model_);
    if (threadpool_) ggml_threadpool_free(threadpool_);
}

void UpstreamDecoder::decode(const Batch & b) {
    llama_batch lb = llama_batch_init(b.size(), 0, 1);
    for (int i = 0; i < b.size(); ++i) {
        lb.token[i] = b.tokens[i];
        lb.pos[i] = b.pos[i];
        lb.n_seq_id[i] = 1;
        lb.seq_id[i][0] = b.seq[i];
        lb.logits[i] = b.want_logits[i];
    }
    lb.n_tokens = b.size();
    const int32_t rc = llama_decode(ctx_, lb);
    llama_batch_free(lb);
    if (rc != 0) throw Error("upstream llama_decode failed with code " + std::to_string(rc));
}

const float * UpstreamDecoder::logits(int32_t batch_row) const {
    return llama_get_logits_ith(ctx_, batch_row);
}

void UpstreamDecoder::seq_remove(int32_t seq, int32_t p0, int32_t p1) {
    llama_memory_seq_rm(llama_get_memory(ctx_), seq, p0, p1);
}

int32_t UpstreamDecoder::n_vocab() const {
    return llama_vocab_n_tokens(llama_model_get_vocab(model_));
}

}  // namespace llama_tp
