#pragma once
// A decoder's shape and numeric settings, and the blocks of its layers,
// read from GGUF metadata by its architecture (runtime/model/arch/).

#include "runtime/blocks/blocks.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llama_tp {

class GgufFile;

enum class RopeScaling { None, Linear, Yarn };

// By its GGUF and llama-server name (none, linear, yarn); nullopt otherwise.
std::optional<RopeScaling> rope_scaling_from_name(const std::string & name);

// RoPE settings a user may override (llama-server's --rope-scaling,
// --rope-scale / --rope-freq-scale, --rope-freq-base and --yarn-*). Unset
// fields keep the model's values, as upstream's llama_context_params do.
struct RopeOverrides {
    std::optional<RopeScaling> scaling;
    float freq_base = 0.0f;          // 0: the model's
    float freq_scale = 0.0f;         // 0: the model's
    int32_t yarn_orig_ctx = 0;       // 0: the model's
    float yarn_ext_factor = -1.0f;   // < 0: 1 with YaRN scaling, else 0
    float yarn_attn_factor = -1.0f;  // < 0: 1
    float yarn_beta_fast = -1.0f;    // < 0: 32
    float yarn_beta_slow = -1.0f;    // < 0: 1
    bool any() const {
        return scaling || freq_base != 0.0f || freq_scale != 0.0f || yarn_orig_ctx != 0 || yarn_ext_factor >= 0.0f ||
               yarn_attn_factor >= 0.0f || yarn_beta_fast >= 0.0f || yarn_beta_slow >= 0.0f;
    }
};

// One layer's attention and FFN shape. Most models give every layer the same;
// Gemma 4's sliding-window and global layers differ in head size, KV heads
// and rotated dimensions, and its KV-sharing layers may have a wider FFN.
struct LayerShape {
    int32_t n_head_kv = 0;
    int32_t head_dim = 0;    // per head, keys (and values, unless head_dim_v says otherwise)
    int32_t n_rot = 0;       // dimensions of a head RoPE rotates
    int32_t n_ff = 0;        // the dense FFN's width (1 for models with experts only)
    int32_t head_dim_v = 0;  // per head, values where they are narrower (expanded latent attention); 0: head_dim
    int32_t v_dim() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
    bool operator==(const LayerShape & o) const {
        return n_head_kv == o.n_head_kv && head_dim == o.head_dim && n_rot == o.n_rot && n_ff == o.n_ff &&
               v_dim() == o.v_dim();
    }
};

// Linear attention's shape (the layers of AttentionBlock::Kind::GatedDeltaNet,
// all alike): key heads and value heads (a multiple of them), each head's
// width, the causal convolution's taps, and how the file lays them out.
struct DeltaNetShape {
    int32_t n_k_heads = 0;
    int32_t n_v_heads = 0;
    int32_t head_k_dim = 0;
    int32_t head_v_dim = 0;
    int32_t conv_kernel = 0;
    // Value head j reads key head j / ratio() (qwen3next), not j % n_k_heads
    // (the tiled order qwen35's converter writes).
    bool grouped = false;
    // q, k, v and the output gate as one ssm_in of a block per key head
    // (early qwen3next files), not attn_qkv beside attn_gate.
    bool fused_qkvz = false;
    // beta and alpha as one ssm_ba of a block per key head (qwen3next), not
    // ssm_beta beside ssm_alpha.
    bool fused_ba = false;
    int64_t key_dim() const { return (int64_t) n_k_heads * head_k_dim; }
    int64_t value_dim() const { return (int64_t) n_v_heads * head_v_dim; }
    int64_t channels() const { return 2 * key_dim() + value_dim(); }  // q, k and v segments of the convolution
    int32_t ratio() const { return n_k_heads > 0 ? n_v_heads / n_k_heads : 0; }
    // The separate ranges of value heads a range of key heads reads.
    int32_t value_blocks() const { return grouped ? 1 : ratio(); }
    // One key head's rows of ssm_in: its q, k, then its value heads' v and z.
    int64_t qkvz_group() const { return 2 * (int64_t) head_k_dim + 2 * (int64_t) ratio() * head_v_dim; }
};

// Multi-head latent attention's shape (AttentionBlock::Kind::MultiHeadLatent,
// all such layers alike): the queries' low-rank pair (0: a plain attn_q),
// the latent's width, and a head's query/key width (its n_rot RoPE part
// last) and value width. A layer caches kv_rank + n_rot values per token:
// the normed latent, then its rotated part; in the expanded form of older
// files (attn_kv_b) it caches every head's key and value instead, as
// grouped-query attention of one query head per KV head.
struct LatentShape {
    bool expanded = false;
    int32_t q_rank = 0;
    int32_t kv_rank = 0;
    int32_t head_k = 0;
    int32_t head_v = 0;
    int32_t n_rot = 0;
    int32_t nope() const { return head_k - n_rot; }
    int32_t cache_row() const { return kv_rank + n_rot; }
};

struct HParams {
    std::string arch_name;  // general.architecture
    // The model of the file's multi-token-prediction layer alone (Qwen 3.5's
    // next-token head, a draft): a token's embedding and the trunk's
    // final-normed hidden state of the position before it in (eh_proj over
    // both, normed), one layer, the next token's logits out. Its layer is
    // the file's block first_file_block.
    bool mtp_head = false;
    int32_t first_file_block = 0;
    // "blk.N." of layer il's tensors in the file.
    std::string tensor_prefix(int il) const { return "blk." + std::to_string(il + first_file_block) + "."; }
    int32_t n_vocab = 0;
    int32_t n_ctx_train = 0;
    int32_t n_embd = 0;
    int32_t n_layer = 0;
    int32_t n_head = 0;
    std::vector<LayerShape> layers;   // one per layer
    std::vector<LayerBlocks> blocks;  // one per layer
    float rms_eps = 1e-5f;
    // Token embeddings multiplied by this (gemma: sqrt(n_embd)); 0: not.
    float embedding_scale = 0.0f;
    // The output head is token_embd whatever else the file holds (gemma2).
    bool head_is_embedding = false;
    // The rows whose logits are wanted are picked after the final norm
    // (gemma4, as upstream does), not before the last layer's residual.
    bool rows_after_norm = false;
    // A reranker's head scores the last token and softmaxes (qwen3's).
    bool classify_last_token = false;

    // Mixture of experts (qwen3moe, and llama with experts: Mixtral): every
    // token goes through n_expert_used of n_expert FFNs of width n_ff_exp,
    // mixed by the router's weights. n_expert is 0 for dense layers.
    int32_t n_expert = 0;
    int32_t n_expert_used = 0;
    int32_t n_ff_exp = 0;
    float expert_weights_scale = 0.0f;  // 0 or 1: none
    // Group-limited routing (DeepSeek V3): experts in n_expert_groups equal
    // groups, each group scored by its two best experts; only the best
    // n_group_used groups' experts may be picked (1: no groups).
    int32_t n_expert_groups = 1;
    int32_t n_group_used = 1;

    bool is_moe() const { return n_expert > 0; }

    // Gemma 4: the last n_kv_shared layers store no keys and values of their
    // own but attend over those of the last earlier layer of their kind
    // (sliding or global), as upstream shares them.
    int32_t n_kv_shared = 0;
    int32_t n_layer_kv() const { return n_layer - n_kv_shared; }
    int kv_layer(int il) const { return il < n_layer_kv() ? il : n_layer_kv() - (is_swa(il) ? 2 : 1); }
    // Gemma 4 (E2B, E4B): every layer adds a projection of a per-layer token
    // embedding of this width (0: none).
    int32_t n_embd_per_layer = 0;

    // Queries scaled by this after RoPE, attention then scaled by 1 (phi3,
    // gemma3: rounded unlike a scale inside attention); 0: attention scales
    // by 1/sqrt(head_dim).
    float query_scale = 0.0f;
    // Logits soft-capped as cap * tanh(logit / cap); 0: not.
    float final_logit_softcap = 0.0f;
    // Attention scores soft-capped the same way (gemma2); 0: not.
    float attn_logit_softcap = 0.0f;

    // Sliding-window attention: a layer in swa_layers sees only the cells of
    // the last n_swa positions (0: no such layers), with its own RoPE base.
    int32_t n_swa = 0;
    std::vector<bool> swa_layers;
    float rope_freq_base_swa = 10000.0f;
    float rope_freq_scale_swa = 1.0f;
    bool is_swa(int il) const { return n_swa > 0 && swa_layers[il]; }

    // RoPE as the file gives it.
    int32_t rope_type = 0;  // ggml rope mode
    RopeScaling rope_scaling_train = RopeScaling::None;
    float rope_freq_base_train = 10000.0f;
    float rope_freq_scale_train = 1.0f;
    float rope_attn_factor = 1.0f;  // rope.scaling.attn_factor: multiplies every rotation
    // YaRN's magnitude over all dimensions (deepseek2's
    // rope.scaling.yarn_log_multiplier, as upstream reads it: over 0.1);
    // 0: none. It sets the rotation's factor and latent attention's scale.
    float rope_yarn_log_mul = 0.0f;
    int32_t n_ctx_orig_train = 0;  // rope.scaling.original_context_length (LongRoPE picks its factors by it)
    // RoPE as the graph applies it: the file's values with a user's
    // overrides (apply_rope_overrides()).
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;
    float yarn_ext_factor = 0.0f;
    float yarn_attn_factor = 1.0f;
    float yarn_beta_fast = 32.0f;
    float yarn_beta_slow = 1.0f;
    int32_t rope_n_ctx_orig = 0;

    DeltaNetShape delta;  // where some layer is linear attention
    LatentShape mla;      // where some layer is latent attention
    // Whether layer il keeps keys and values per cell (linear attention keeps a state instead).
    bool keeps_kv(int il) const { return blocks[il].attention.keeps_kv(); }
    // Whether some layer keeps a recurrent state per sequence.
    bool recurrent() const {
        for (const LayerBlocks & b : blocks) {
            if (!b.attention.keeps_kv()) return true;
        }
        return false;
    }

    const LayerShape & layer(int il) const { return layers[il]; }
    const LayerBlocks & block(int il) const { return blocks[il]; }
    int32_t n_embd_q(int il) const { return n_head * layers[il].head_dim; }
    // A head's width in attn_output's input: its value width (latent
    // attention's head_v; else the head size).
    int32_t out_head_dim(int il) const {
        return blocks[il].attention.kind == AttentionBlock::Kind::MultiHeadLatent ? mla.head_v : layers[il].head_dim;
    }
    int32_t n_embd_kv(int il) const { return layers[il].n_head_kv * layers[il].head_dim; }
    // Every layer shaped as `shape` (models whose files give one shape).
    void set_uniform_layers(const LayerShape & shape) { layers.assign(n_layer, shape); }
};

// Throws llama_tp::Error naming the file and key for a missing or
// inconsistent value, or an architecture this runtime does not build.
// mtp_head: the model of the file's multi-token-prediction layer
// (HParams::mtp_head); an error where the file has none llama-tp runs.
HParams read_hparams(const GgufFile & file, bool mtp_head = false);

// Derives the RoPE values the graph applies from the file's and the
// overrides, by upstream's rules (llama_context's): no scaling forces a
// frequency scale of 1; YaRN extrapolates (ext factor 1) unless told, and its
// attention factor cancels the magnitude ggml's rope adds. The
// sliding-window layers keep their own base and scale, and the training
// context stays the file's (upstream sizes a default context by it too).
void apply_rope_overrides(HParams & hp, const RopeOverrides & o);

}  // namespace llama_tp
