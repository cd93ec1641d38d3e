#pragma once
// The blocks a layer is made of, each a kind with its own settings. An
// architecture (runtime/model/arch/) says which blocks its layers have; the
// weights, the shard plan and the graph build each block by its kind and
// settings, never by the architecture's name.

#include <string>

namespace llama_tp {

// A layer's attention.
struct AttentionBlock {
    enum class Kind {
        // Grouped-query attention: Q, K and V (or one fused QKV matrix) split
        // by heads across ranks, the output projection by its input
        // (row-parallel). Keeps keys and values per cell.
        GroupedQuery,
        // Linear attention (Gated DeltaNet: qwen35): a causal convolution and
        // a delta-rule recurrence per value head, split by key heads with the
        // value heads that read them. Keeps a fixed-size state per sequence
        // (runtime/blocks/delta_net.cpp).
        GatedDeltaNet,
        // Multi-head latent attention (deepseek2: DeepSeek V2/V3/R1, Kimi
        // K2): keys and values from one compressed latent that every rank
        // computes and caches whole (with its RoPE part, shared by all
        // heads); queries and the latent's expansion (attn_k_b, attn_v_b)
        // split by heads; attention over the latent itself (upstream's
        // absorbed form) (runtime/blocks/latent_attention.cpp).
        MultiHeadLatent,
    };
    Kind kind = Kind::GroupedQuery;
    bool qkv_bias = false;         // biases on Q, K and V (qwen2, gpt-oss)
    bool qk_norm = false;          // per-head RMS norms of queries and keys
    bool value_norm = false;       // values RMS-normed without a weight (gemma4)
    bool values_optional = false;  // attn_v may be absent: the values are the keys' projection (gemma4)
    bool sinks = false;            // one logit per head and a bias on the output (gpt-oss)
    bool post_norm = false;        // an RMS norm of the block's output (post_attention_norm: gemma)
    bool rope_factors = true;      // its RoPE reads the model's frequency factors (not gemma4's sliding layers)
    bool output_gate = false;      // attn_q holds each head's queries, then its gate: out *= sigmoid(gate) (qwen35)
    // Latent attention in the expanded form of older files (attn_kv_b): the
    // latent expanded to every head's keys and values, cached per head.
    bool latent_expanded = false;
    bool keeps_kv() const { return kind != Kind::GatedDeltaNet; }
    // Its values are the first columns of its keys (latent attention): the cache holds keys only.
    bool values_in_keys() const { return kind == Kind::MultiHeadLatent && !latent_expanded; }
};

// A layer's feed-forward network.
struct FfnBlock {
    enum class Kind {
        Dense,            // one gated FFN, split by its width
        Experts,          // routed experts, every expert's width split, the router mirrored
        DenseAndExperts,  // both, each normed on its own, added (gemma4)
        // Routed experts and a shared expert (a dense FFN of its own width,
        // its tensors named *_shexp) from the same input, added; the shared
        // one scaled per token by sigmoid(ffn_gate_inp_shexp . x) where
        // shared_gate says (qwen35moe; glm4moe's is not).
        ExpertsAndShared,
    };
    // How the gate meets the up projection.
    enum class Gate {
        SwiGlu,         // silu(gate) * up
        GeGlu,          // gelu(gate) * up (gemma)
        SwiGluClamped,  // gpt-oss's: alpha 1.702, limit 7
    };
    Kind kind = Kind::Dense;
    Gate gate = Gate::SwiGlu;
    std::string input_norm = "ffn_norm";  // the norm before it (gpt-oss: post_attention_norm)
    bool post_norm = false;               // an RMS norm of the block's output (post_ffw_norm: gemma)
    bool fused_gate_up = false;           // ffn_up holds the gate's rows, then the up's (phi3)
    // How the router's logits become the picked experts' weights.
    enum class Routing {
        Softmax,          // softmax over all experts (qwen3moe, mixtral)
        SoftmaxOfPicked,  // the top-k logits picked, softmaxed over those (gpt-oss)
        Sigmoid,          // a sigmoid per expert (glm4moe, DeepSeek V3)
    };
    Routing routing = Routing::Softmax;
    // The picked weights divided by their sum (upstream's expert_weights_norm).
    bool normalize_weights = true;
    // A bias per expert (exp_probs_b) added to the probabilities that pick
    // the experts, not to their weights (glm4moe, DeepSeek V3).
    bool selection_bias = false;
    bool shared_gate = true;  // ExpertsAndShared: see there
    // Biases on the router and every expert matrix (gpt-oss); a scale on the
    // router's input, one per expert on the down projection and norms around
    // both halves (gemma4).
    bool expert_biases = false;
    bool expert_scales = false;

    bool has_dense() const { return kind != Kind::Experts; }
    bool has_experts() const { return kind != Kind::Dense; }
    // What the dense FFN's tensors are called after ffn_gate, ffn_up, ffn_down.
    const char * dense_suffix() const { return kind == Kind::ExpertsAndShared ? "_shexp" : ""; }
};

struct LayerBlocks {
    AttentionBlock attention;
    FfnBlock ffn;
    bool output_scale = false;  // a scale on the layer's output, where the file has one (gemma4)
};

}  // namespace llama_tp
