// qwen35 and qwen35moe (Qwen 3.5 and its successors, dense and with
// experts), and qwen3next (Qwen3-Next, with experts): three of every four
// layers linear attention (Gated DeltaNet), the others full attention whose
// queries carry an output gate, with Q/K norms and a quarter of each head
// rotated. The FFNs with experts are routed experts beside a shared expert
// of its own width, gated per token. qwen3next's files order the linear
// attention's value heads by the key head they read and fuse its beta and
// alpha projections (ssm_ba); its early files fuse q, k, v and the gate too
// (ssm_in).
// Interleaved M-RoPE over text gives every section the same position, which
// is NeoX RoPE of the rotated dimensions. The FFN's input norm is called
// post_attention_norm. The multi-token-prediction layer (nextn_predict_layers
// 1, after the trunk's) is a model of its own (HParams::mtp_head): a full
// attention layer.
#include "runtime/error.h"
#include "runtime/model/arch/architectures.h"
#include "runtime/model/arch/metadata.h"
#include "runtime/model/gguf_file.h"

#include "ggml.h"

namespace llama_tp {

namespace {

// Which layers are linear attention: the file's recurrent_layers flags, or
// all but every full_attention_interval-th.
std::vector<bool> linear_layers(const GgufFile & file, const std::string & a, int32_t n_layer) {
    const std::string flags = a + ".attention.recurrent_layers";
    std::vector<bool> linear(n_layer);
    if (file.is_array(flags)) {
        const std::vector<int64_t> v = file.get_int_array(flags);
        if ((int32_t) v.size() < n_layer) {
            throw Error("model file '" + file.path() + "': " + flags + " has " + std::to_string(v.size()) +
                        " entries for " + std::to_string(n_layer) + " layers");
        }
        for (int il = 0; il < n_layer; ++il) linear[il] = v[il] != 0;
        return linear;
    }
    const int64_t interval = file.get_int(a + ".full_attention_interval", 4);
    require_positive(file, "full_attention_interval", interval);
    for (int il = 0; il < n_layer; ++il) linear[il] = (il + 1) % interval != 0;
    return linear;
}

DeltaNetShape read_delta_net(const GgufFile & file, const std::string & a) {
    DeltaNetShape d;
    d.n_k_heads = file.get_int32(a + ".ssm.group_count");
    d.n_v_heads = file.get_int32(a + ".ssm.time_step_rank");
    d.head_k_dim = file.get_int32(a + ".ssm.state_size");
    d.conv_kernel = file.get_int32(a + ".ssm.conv_kernel");
    const int64_t inner = file.get_int(a + ".ssm.inner_size");
    for (auto [what, v] : {std::pair<const char *, int64_t>{"ssm.group_count", d.n_k_heads},
                           {"ssm.time_step_rank", d.n_v_heads},
                           {"ssm.state_size", d.head_k_dim},
                           {"ssm.conv_kernel", d.conv_kernel},
                           {"ssm.inner_size", inner}}) {
        require_positive(file, what, v);
    }
    if (d.n_v_heads % d.n_k_heads != 0 || inner % d.n_v_heads != 0 || inner / d.n_v_heads != d.head_k_dim) {
        throw Error("model file '" + file.path() + "': linear attention of " + std::to_string(d.n_k_heads) +
                    " key heads and " + std::to_string(d.n_v_heads) + " value heads (ssm.inner_size " +
                    std::to_string(inner) + ", ssm.state_size " + std::to_string(d.head_k_dim) +
                    ") is not supported: value heads must be a multiple of key heads, each as wide as a key head");
    }
    d.head_v_dim = (int32_t) (inner / d.n_v_heads);
    return d;
}

// Interleaved M-RoPE rotates pair i by the position of section i % 3 (text,
// height, width) while that section has pairs left, else by the fourth's.
// Text gives the first three one position and the fourth none, so it is
// NeoX RoPE only where every rotated pair falls in one of the three.
void check_rope_sections(const GgufFile & file, const std::string & a, int32_t n_rot) {
    const std::string key = a + ".rope.dimension_sections";
    if (!file.has_key(key)) return;
    const std::vector<int64_t> s = file.get_int_array(key);
    for (int32_t pair = 0; pair < n_rot / 2; ++pair) {
        const int64_t in = pair % 3;
        if ((int64_t) s.size() <= in || pair >= 3 * s[in]) {
            throw Error("model file '" + file.path() + "': " + key + " leaves rotated pair " + std::to_string(pair) +
                        " to the fourth section, which llama-tp does not rotate (text only)");
        }
    }
}

// What both share; ffn: the blocks' FFN.
void read_qwen35_family(const GgufFile & file, const std::string & a, HParams & hp, const FfnBlock & ffn) {
    const int32_t n_nextn = skip_nextn_layers(file, a, hp);
    const int32_t n_trunk = hp.n_layer;
    if (hp.mtp_head) {
        if (n_nextn == 0) {
            throw Error("model file '" + file.path() +
                        "' has no multi-token-prediction layer (nextn_predict_layers): take a conversion that "
                        "keeps it");
        }
        if (n_nextn != 1) {
            throw Error("model file '" + file.path() + "': nextn_predict_layers is " + std::to_string(n_nextn) +
                        "; llama-tp drafts with one prediction layer, as Qwen 3.5's files carry");
        }
        hp.n_layer = n_trunk + 1;  // its shape is the file's last block's
    }
    read_rope(file, a, hp, GGML_ROPE_TYPE_NEOX);
    read_layer_shapes(file, a, hp, /*experts_only =*/ffn.kind != FfnBlock::Kind::Dense);
    check_rope_sections(file, a, hp.layer(0).n_rot);
    hp.delta = read_delta_net(file, a);
    hp.rows_after_norm = true;  // as upstream's qwen35 graph picks them
    LayerBlocks full;
    full.attention.qk_norm = true;
    full.attention.output_gate = true;
    full.ffn = ffn;
    full.ffn.input_norm = "post_attention_norm";
    if (hp.mtp_head) {
        hp.layers = {hp.layers.back()};
        hp.n_layer = 1;
        hp.first_file_block = n_trunk;
        hp.blocks = {full};
        return;
    }
    const std::vector<bool> linear = linear_layers(file, a, hp.n_layer);
    LayerBlocks delta = full;
    delta.attention = AttentionBlock{};
    delta.attention.kind = AttentionBlock::Kind::GatedDeltaNet;
    for (int il = 0; il < hp.n_layer; ++il) hp.blocks.push_back(linear[il] ? delta : full);
}

}  // namespace

void read_qwen35(const GgufFile & file, const std::string & a, HParams & hp) {
    read_qwen35_family(file, a, hp, FfnBlock{});
}

void read_qwen35moe(const GgufFile & file, const std::string & a, HParams & hp) {
    FfnBlock ffn;
    ffn.kind = FfnBlock::Kind::ExpertsAndShared;
    read_qwen35_family(file, a, hp, ffn);
    read_experts(file, a, hp, /*required =*/true, /*width_is_ffn =*/false);
    // The shared expert's width, as upstream reads it (else the FFN's).
    const int32_t shared = file.get_int32(a + ".expert_shared_feed_forward_length", hp.layer(0).n_ff);
    require_positive(file, "expert_shared_feed_forward_length", shared);
    for (LayerShape & s : hp.layers) s.n_ff = shared;
}

void read_qwen3next(const GgufFile & file, const std::string & a, HParams & hp) {
    read_qwen35moe(file, a, hp);
    hp.delta.grouped = true;
    hp.delta.fused_ba = true;
    for (int il = 0; il < hp.n_layer; ++il) {
        if (hp.keeps_kv(il)) continue;
        hp.delta.fused_qkvz = file.find_tensor("blk." + std::to_string(il) + ".ssm_in.weight") != nullptr;
        break;
    }
}

}  // namespace llama_tp
