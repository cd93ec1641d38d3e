// deepseek2 (DeepSeek V2, V2.5, V3, R1; Kimi K2): multi-head latent
// attention in the absorbed form upstream's converters write (attn_k_b and
// attn_v_b per head) or the older expanded one (attn_kv_b), RoPE on each head's last n_rot dimensions (pairs side
// by side); the first leading_dense_block_count layers a dense FFN, the
// others routed experts (softmax scores, or sigmoid plus a selection bias,
// group-limited) beside an ungated shared expert. Multi-token-prediction
// layers are not read.
#include "runtime/error.h"
#include "runtime/model/arch/architectures.h"
#include "runtime/model/arch/metadata.h"
#include "runtime/model/gguf_file.h"

#include "ggml.h"

namespace llama_tp {

namespace {

// The absorbed form's files give a head's widths under *_mla (their
// key_length is the latent's); the older expanded form's under key_length.
LatentShape read_latent(const GgufFile & file, const std::string & a) {
    const std::string k_mla = a + ".attention.key_length_mla", v_mla = a + ".attention.value_length_mla";
    LatentShape m;
    m.expanded = !file.has_key(k_mla) || !file.has_key(v_mla);
    m.q_rank = file.get_int32(a + ".attention.q_lora_rank", 0);
    m.kv_rank = file.get_int32(a + ".attention.kv_lora_rank");
    m.head_k = file.get_int32(m.expanded ? a + ".attention.key_length" : k_mla);
    m.head_v = file.get_int32(m.expanded ? a + ".attention.value_length" : v_mla);
    m.n_rot = file.get_int32(a + ".rope.dimension_count");
    for (auto [what, v] : {std::pair<const char *, int64_t>{"attention.kv_lora_rank", m.kv_rank},
                           {"attention.key_length_mla", m.head_k},
                           {"attention.value_length_mla", m.head_v},
                           {"rope.dimension_count", m.n_rot}}) {
        require_positive(file, what, v);
    }
    if (m.q_rank < 0) require_positive(file, "attention.q_lora_rank", m.q_rank);
    if (m.n_rot >= m.head_k || m.n_rot % 2 != 0) {
        throw Error("model file '" + file.path() + "': rope.dimension_count " + std::to_string(m.n_rot) +
                    " leaves no unrotated part of key_length_mla " + std::to_string(m.head_k));
    }
    return m;
}

}  // namespace

void read_deepseek2(const GgufFile & file, const std::string & a, HParams & hp) {
    skip_nextn_layers(file, a, hp);
    if (file.get_float(a + ".attention.temperature_scale", 0.0) != 0.0) {
        throw Error("model file '" + file.path() +
                    "': attention.temperature_scale (attention temperature tuning) "
                    "is not supported");
    }
    read_rope(file, a, hp, GGML_ROPE_TYPE_NORMAL);
    hp.mla = read_latent(file, a);
    // As upstream reads it: the converter's 0.1 taken out.
    hp.rope_yarn_log_mul = (float) file.get_float(a + ".rope.scaling.yarn_log_multiplier", 0.0) / 0.1f;
    apply_rope_overrides(hp, RopeOverrides{});
    read_experts(file, a, hp, /*required =*/true, /*width_is_ffn =*/false);
    hp.n_expert_groups = file.get_int32(a + ".expert_group_count", 1);
    hp.n_group_used = file.get_int32(a + ".expert_group_used_count", 1);
    // Groups are scored by their two best experts: two at least each.
    if (hp.n_expert_groups < 1 || hp.n_expert % hp.n_expert_groups != 0 || hp.n_group_used < 1 ||
        (hp.n_expert_groups > 1 && hp.n_expert / hp.n_expert_groups < 2) || hp.n_group_used > hp.n_expert_groups ||
        (hp.n_expert_groups > 1 && hp.n_group_used * (hp.n_expert / hp.n_expert_groups) < hp.n_expert_used)) {
        throw Error("model file '" + file.path() + "': expert_group_count " + std::to_string(hp.n_expert_groups) +
                    " and expert_group_used_count " + std::to_string(hp.n_group_used) + " do not fit " +
                    std::to_string(hp.n_expert) + " experts of which " + std::to_string(hp.n_expert_used) +
                    " are used");
    }
    const DenseThenExperts counts = read_dense_then_experts(file, a, hp);
    const int32_t n_ff = counts.n_dense > 0 ? file.get_int32(a + ".feed_forward_length") : 1;
    require_positive(file, "feed_forward_length", n_ff);
    // Every layer caches one latent row: one KV "head" of kv_rank + n_rot
    // values; expanded, every head's key and value.
    const LatentShape & m = hp.mla;
    hp.set_uniform_layers(m.expanded ? LayerShape{hp.n_head, m.head_k, m.n_rot, n_ff, m.head_v}
                                     : LayerShape{1, m.cache_row(), m.n_rot, n_ff});
    LayerBlocks dense;
    dense.attention.kind = AttentionBlock::Kind::MultiHeadLatent;
    dense.attention.latent_expanded = m.expanded;
    // Softmax scores where the file names none, as DeepSeek V2's files.
    const LayerBlocks experts = routed_experts_blocks(file, a, dense, counts, FfnBlock::Routing::Softmax);
    place_dense_then_experts(hp, dense, experts, counts);
}

}  // namespace llama_tp
