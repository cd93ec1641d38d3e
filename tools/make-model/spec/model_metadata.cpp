// A generated model's hyperparameters and general.* keys, under the GGUF key
// names upstream reads.
#include "tools/make-model/spec/model_spec.h"

#include "tools/make-model/spec/arch_traits.h"

#include "gguf.h"
#include "llama.h"

#include <cmath>
#include <string>

namespace llama_tp::make_model {
namespace {

int32_t llama_file_type(WeightType type) {
    switch (type) {
        case WeightType::f32:
            return LLAMA_FTYPE_ALL_F32;
        case WeightType::f16:
            return LLAMA_FTYPE_MOSTLY_F16;
        case WeightType::q8_0:
            return LLAMA_FTYPE_MOSTLY_Q8_0;
        case WeightType::q4_0:
            return LLAMA_FTYPE_MOSTLY_Q4_0;
        case WeightType::q4_k:
            return LLAMA_FTYPE_MOSTLY_Q4_K_M;  // 4-bit K-quant body, 8-bit embedding and output
        case WeightType::mxfp4:
            return LLAMA_FTYPE_MOSTLY_MXFP4_MOE;
    }
    return LLAMA_FTYPE_ALL_F32;
}
std::string arch_key(Arch arch, const char * suffix) {
    return std::string(arch_name(arch)) + "." + suffix;
}

// gemma4's per-layer shapes and sharing, under the keys its converter writes:
// arrays where layers differ (head_count_kv, feed_forward_length, the
// sliding-window flags), the global layers' head size as key_length and the
// sliding ones' as key_length_swa.
void set_gemma4_metadata(gguf_context * gguf, const Shape & s) {
    const auto key = [](const char * suffix) { return arch_key(Arch::gemma4, suffix); };
    const auto set_u32 = [&](const char * suffix, int64_t v) {
        gguf_set_val_u32(gguf, key(suffix).c_str(), static_cast<uint32_t>(v));
    };
    std::vector<int32_t> kv_heads, ff;
    std::vector<int8_t> swa;
    for (int64_t il = 0; il < s.n_layer; ++il) {
        const LayerDims d = layer_dims(Arch::gemma4, s, il);
        kv_heads.push_back((int32_t) d.n_head_kv);
        ff.push_back((int32_t) d.n_ff);
        swa.push_back(d.swa ? 1 : 0);
    }
    gguf_set_arr_data(gguf, key("attention.head_count_kv").c_str(), GGUF_TYPE_INT32, kv_heads.data(), kv_heads.size());
    if (s.n_kv_shared > 0) {
        gguf_set_arr_data(gguf, key("feed_forward_length").c_str(), GGUF_TYPE_INT32, ff.data(), ff.size());
    }
    gguf_set_arr_data(gguf, key("attention.sliding_window_pattern").c_str(), GGUF_TYPE_BOOL, swa.data(), swa.size());
    set_u32("attention.key_length", s.head_dim_global);
    set_u32("attention.value_length", s.head_dim_global);
    set_u32("attention.key_length_swa", s.head_dim);
    set_u32("attention.value_length_swa", s.head_dim);
    set_u32("rope.dimension_count", s.head_dim_global);
    set_u32("rope.dimension_count_swa", s.head_dim);
    gguf_set_val_f32(gguf, key("rope.freq_base_swa").c_str(), 10000.0f);
    set_u32("attention.sliding_window", s.n_swa);
    set_u32("attention.shared_kv_layers", s.n_kv_shared);
    set_u32("embedding_length_per_layer_input", s.n_embd_per_layer);
    gguf_set_val_f32(gguf, key("final_logit_softcapping").c_str(), static_cast<float>(s.logit_softcap));
}
}  // namespace

void set_model_metadata(gguf_context * gguf, const ModelSpec & spec, int64_t n_vocab) {
    const Arch arch = spec.arch;
    const Shape & s = spec.shape;
    gguf_set_val_str(gguf, "general.architecture", arch_name(arch));
    gguf_set_val_str(gguf, "general.type", "model");
    gguf_set_val_str(gguf, "general.name", spec.display_name().c_str());
    gguf_set_val_u32(gguf, "general.file_type", static_cast<uint32_t>(llama_file_type(spec.type)));
    gguf_set_val_u32(gguf, "general.quantization_version", GGML_QNT_VERSION);

    const auto set_u32 = [&](const char * suffix, int64_t value) {
        gguf_set_val_u32(gguf, arch_key(arch, suffix).c_str(), static_cast<uint32_t>(value));
    };
    set_u32("vocab_size", n_vocab);
    set_u32("context_length", s.n_ctx);
    set_u32("embedding_length", s.n_embd);
    set_u32("block_count", s.n_layer + s.n_nextn);
    if (s.n_nextn > 0) set_u32("nextn_predict_layers", s.n_nextn);
    set_u32("feed_forward_length", s.n_ff);
    set_u32("attention.head_count", s.n_head);
    set_u32("attention.head_count_kv", s.n_head_kv);
    set_u32("attention.key_length", s.head_dim);
    set_u32("attention.value_length", s.head_dim);
    set_u32("rope.dimension_count", s.n_rot);
    gguf_set_val_f32(gguf, arch_key(arch, "rope.freq_base").c_str(), static_cast<float>(s.rope_theta));
    gguf_set_val_f32(gguf, arch_key(arch, "attention.layer_norm_rms_epsilon").c_str(), s.rms_eps);
    if (arch == Arch::gpt_oss) {
        set_u32("attention.sliding_window", s.n_swa);
        if (s.swa_pattern > 0) {
            set_u32("attention.sliding_window_pattern", s.swa_pattern);
        }
    }
    if (arch == Arch::gemma2 || arch == Arch::gemma3) {
        set_u32("attention.sliding_window", s.n_swa);
        set_u32("attention.sliding_window_pattern", s.swa_pattern);
        if (arch == Arch::gemma3) {
            gguf_set_val_f32(gguf, arch_key(arch, "rope.freq_base_swa").c_str(), 10000.0f);
        } else {
            gguf_set_val_f32(gguf, arch_key(arch, "attn_logit_softcapping").c_str(), 50.0f);
        }
        if (s.logit_softcap > 0.0) {
            gguf_set_val_f32(gguf, arch_key(arch, "final_logit_softcapping").c_str(),
                             static_cast<float>(s.logit_softcap));
        }
    }
    if (arch == Arch::phi3) {
        // The converter's LongRoPE magnitude factor for n_ctx / n_ctx_orig.
        const double scale = static_cast<double>(s.n_ctx) / static_cast<double>(s.n_ctx_orig);
        const double attn_factor =
            scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(s.n_ctx_orig))) : 1.0;
        set_u32("rope.scaling.original_context_length", s.n_ctx_orig);
        gguf_set_val_f32(gguf, arch_key(arch, "rope.scaling.attn_factor").c_str(), static_cast<float>(attn_factor));
    }
    if (arch == Arch::gemma4) set_gemma4_metadata(gguf, s);
    if (has_linear_attention(arch)) {
        set_u32("full_attention_interval", s.full_attention_interval);
        set_u32("ssm.conv_kernel", s.ssm_d_conv);
        set_u32("ssm.inner_size", s.ssm_dt_rank * s.ssm_d_state);
        set_u32("ssm.state_size", s.ssm_d_state);
        set_u32("ssm.time_step_rank", s.ssm_dt_rank);
        set_u32("ssm.group_count", s.ssm_n_group);
    }
    if (arch == Arch::qwen35 || arch == Arch::qwen35moe) {
        // Interleaved M-RoPE's sections over the rotated pairs (text, height,
        // width, none), pair i in section i % 3 as the releases' [11, 11, 10,
        // 0]: text tokens get one position in all three, which is plain NeoX
        // RoPE. qwen3next's RoPE is NeoX's.
        const int32_t pairs = static_cast<int32_t>(s.n_rot / 2);
        const int32_t sections[4] = {(pairs + 2) / 3, (pairs + 1) / 3, pairs / 3, 0};
        gguf_set_arr_data(gguf, arch_key(arch, "rope.dimension_sections").c_str(), GGUF_TYPE_INT32, sections, 4);
    }
    if (s.reranker) {
        set_u32("pooling_type", 4);  // LLAMA_POOLING_TYPE_RANK
        const char * labels[] = {"yes", "no"};
        gguf_set_arr_str(gguf, arch_key(arch, "classifier.output_labels").c_str(), labels, 2);
        // The prompt a query and a document fill, in Qwen3-Reranker's turn format.
        gguf_set_val_str(gguf, "tokenizer.chat_template.rerank",
                         "<|im_start|>user\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
                         "<|im_start|>assistant\n");
    }
    if (has_experts(s)) {
        set_u32("expert_count", s.n_expert);
        set_u32("expert_used_count", s.n_expert_used);
        // llama's experts are feed_forward_length wide; upstream's converter writes no width of their own.
        if (arch != Arch::llama) {
            set_u32("expert_feed_forward_length", s.n_ff_exp);
        }
        if (has_gated_shared_expert(arch)) set_u32("expert_shared_feed_forward_length", s.n_ff_exp);
    }
    if (has_leading_dense_layers(arch)) {
        // GLM-4.5's and DeepSeek V3's routing: sigmoid scores
        // (expert_gating_func 2), the picked weights normalised and scaled by
        // 2.5; DeepSeek V2's softmax scores (1), neither.
        const bool softmax = s.softmax_routing;
        set_u32("leading_dense_block_count", s.n_dense_lead);
        set_u32("expert_shared_count", s.n_expert_shared);
        set_u32("expert_gating_func", softmax ? 1 : 2);
        gguf_set_val_bool(gguf, arch_key(arch, "expert_weights_norm").c_str(), !softmax);
        gguf_set_val_f32(gguf, arch_key(arch, "expert_weights_scale").c_str(), softmax ? 1.0f : 2.5f);
    }
    if (arch == Arch::deepseek2) {
        // Latent attention as the converter writes it: one KV "head" of the
        // latent and its RoPE part, values the latent; the heads' own widths
        // under *_mla.
        // The expanded form: every head's own key and value, no *_mla keys.
        if (s.latent_expanded) {
            set_u32("attention.head_count_kv", s.n_head);
            set_u32("attention.key_length", s.head_dim);
            set_u32("attention.value_length", s.v_head_dim);
        } else {
            set_u32("attention.head_count_kv", 1);
            set_u32("attention.key_length", s.kv_lora_rank + s.n_rot);
            set_u32("attention.value_length", s.kv_lora_rank);
            set_u32("attention.key_length_mla", s.head_dim);
            set_u32("attention.value_length_mla", s.v_head_dim);
        }
        set_u32("attention.q_lora_rank", s.q_lora_rank);
        set_u32("attention.kv_lora_rank", s.kv_lora_rank);
        set_u32("expert_group_count", s.n_expert_groups);
        set_u32("expert_group_used_count", s.n_group_used);
        // YaRN as V3's config asks for it (there 40x over 4096 positions,
        // here 4x over a quarter of the context), its magnitude over all
        // dimensions as the converter writes it (0.1 times the config's 1).
        gguf_set_val_str(gguf, arch_key(arch, "rope.scaling.type").c_str(), "yarn");
        gguf_set_val_f32(gguf, arch_key(arch, "rope.scaling.factor").c_str(), 4.0f);
        set_u32("rope.scaling.original_context_length", s.n_ctx / 4);
        gguf_set_val_f32(gguf, arch_key(arch, "rope.scaling.yarn_log_multiplier").c_str(), 0.1f);
    }
}

}  // namespace llama_tp::make_model
