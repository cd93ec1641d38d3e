#include "runtime/model_info.h"

#include <cstdio>
#include <map>

#include "ggml.h"
#include "llama.h"

namespace llama_tp {
namespace {

std::string file_name_of(const std::string & path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool has_layer_matrix(const GgufFile & file, bool (*of_type)(ggml_type)) {
    for (int64_t i = 0; i < file.n_tensors(); ++i) {
        const ggml_tensor * t = file.tensor_at(i);
        if (std::string(t->name).rfind("blk.", 0) == 0 && ggml_n_dims(t) >= 2 && of_type(t->type)) return true;
    }
    return false;
}

// The file type a file of mostly `type` tensors is taken for when it does not
// say (libllama's guess: a K-quant is taken for its medium mix).
llama_ftype file_type_of_tensors(ggml_type type) {
    switch (type) {
        case GGML_TYPE_F16:
            return LLAMA_FTYPE_MOSTLY_F16;
        case GGML_TYPE_BF16:
            return LLAMA_FTYPE_MOSTLY_BF16;
        case GGML_TYPE_Q4_0:
            return LLAMA_FTYPE_MOSTLY_Q4_0;
        case GGML_TYPE_Q4_1:
            return LLAMA_FTYPE_MOSTLY_Q4_1;
        case GGML_TYPE_Q5_0:
            return LLAMA_FTYPE_MOSTLY_Q5_0;
        case GGML_TYPE_Q5_1:
            return LLAMA_FTYPE_MOSTLY_Q5_1;
        case GGML_TYPE_Q8_0:
            return LLAMA_FTYPE_MOSTLY_Q8_0;
        case GGML_TYPE_Q2_K:
            return LLAMA_FTYPE_MOSTLY_Q2_K;
        case GGML_TYPE_Q3_K:
            return LLAMA_FTYPE_MOSTLY_Q3_K_M;
        case GGML_TYPE_Q4_K:
            return LLAMA_FTYPE_MOSTLY_Q4_K_M;
        case GGML_TYPE_Q5_K:
            return LLAMA_FTYPE_MOSTLY_Q5_K_M;
        case GGML_TYPE_Q6_K:
            return LLAMA_FTYPE_MOSTLY_Q6_K;
        case GGML_TYPE_IQ4_NL:
            return LLAMA_FTYPE_MOSTLY_IQ4_NL;
        case GGML_TYPE_IQ4_XS:
            return LLAMA_FTYPE_MOSTLY_IQ4_XS;
        default:
            return LLAMA_FTYPE_ALL_F32;
    }
}

// The file type's name as llama-server shows it ("Q4_K - Medium"): the
// file's general.file_type, else a guess from its commonest tensor type,
// marked "(guessed)".
std::string file_type_name(const GgufFile & file) {
    if (file.has_key("general.file_type")) {
        return llama_ftype_name(static_cast<llama_ftype>(file.get_int("general.file_type")));
    }
    std::map<ggml_type, int64_t> count;
    for (int64_t i = 0; i < file.n_tensors(); ++i) ++count[file.tensor_at(i)->type];
    ggml_type commonest = GGML_TYPE_F32;
    int64_t most = 0;
    for (const auto & [type, n] : count) {
        if (n > most) commonest = type, most = n;
    }
    return llama_ftype_name(static_cast<llama_ftype>(file_type_of_tensors(commonest) | LLAMA_FTYPE_GUESSED));
}

bool is_half(ggml_type type) {
    return type == GGML_TYPE_F16 || type == GGML_TYPE_BF16;
}

std::string kv_format_text(const GgufFile & file, const HParams & hp, const EngineOptions & o,
                           int32_t n_cells_per_seq) {
    char text[384];
    std::snprintf(text, sizeof text,
                  "rope base %g, scale %g, sliding base %g, scale %g, yarn ext %g, attn %g, beta %g/%g, original "
                  "context %d",
                  hp.rope_freq_base, hp.rope_freq_scale, hp.rope_freq_base_swa, hp.rope_freq_scale_swa,
                  hp.yarn_ext_factor, hp.yarn_attn_factor, hp.yarn_beta_fast, hp.yarn_beta_slow, hp.rope_n_ctx_orig);
    std::string s = text;
    // LongRoPE picks its factors by the context per sequence (ModelWeights::rope_factors).
    if (file.find_tensor("rope_factors_long.weight")) {
        s += std::string(", LongRoPE ") + (GGML_PAD(n_cells_per_seq, 256) > hp.n_ctx_orig_train ? "long" : "short");
    }
    s += std::string("; k ") + kv_type_name(o.kv_types.k) + ", v " + kv_type_name(o.kv_types.v);
    return s;
}

}  // namespace

ModelInfo describe_model(const GgufFile & file, const HParams & hp, const EngineOptions & o, int32_t n_cells_per_seq) {
    ModelInfo info;
    info.kv_format = kv_format_text(file, hp, o, n_cells_per_seq);
    info.path = o.model_path;
    info.file_size = file.file_size();
    info.header_digest = file.header_digest();
    info.name = file.get_string("general.name", file_name_of(o.model_path));
    info.architecture = hp.arch_name;
    info.n_vocab = hp.n_vocab;
    info.n_ctx_train = hp.n_ctx_train;
    info.n_embd = hp.n_embd;
    info.n_layer = hp.n_layer;
    info.n_head = hp.n_head;
    for (int il = 0; il < hp.n_layer_kv(); ++il) {
        if (hp.keeps_kv(il)) info.n_embd_kv += hp.n_embd_kv(il);
    }
    info.moe = hp.is_moe();
    info.recurrent = hp.recurrent();
    for (const LayerBlocks & b : hp.blocks) info.latent_attention |= b.attention.values_in_keys();
    info.quantized = has_layer_matrix(file, ggml_is_quantized);
    info.half_weights = !info.quantized && has_layer_matrix(file, is_half);
    info.file_type = file_type_name(file);
    return info;
}

LoraAdapterInfo describe_lora_adapter(const std::string & path) {
    const GgufFile file(path);
    return {file.get_string("adapter.lora.task_name", ""), file.get_string("adapter.lora.prompt_prefix", "")};
}

}  // namespace llama_tp
