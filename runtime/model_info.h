#pragma once
// What a loaded model is, for logs, /v1/models and /props.

#include "runtime/engine_options.h"
#include "runtime/model/gguf_file.h"
#include "runtime/model/hparams.h"

#include <cstdint>
#include <string>

namespace llama_tp {

struct ModelInfo {
    std::string path;
    std::string name;          // general.name, or the file name
    std::string architecture;  // general.architecture
    int32_t n_vocab = 0;
    int32_t n_ctx_train = 0;
    int32_t n_embd = 0;
    int32_t n_layer = 0;
    int32_t n_head = 0;
    int64_t n_embd_kv = 0;          // key (or value) elements a token stores, all layers together
    bool moe = false;               // mixture-of-experts layers
    bool recurrent = false;         // linear-attention layers, keeping a state per sequence
    bool latent_attention = false;  // latent-attention layers, caching one latent row per token
    // A layer matrix is quantized, so ggml quantizes the activations it
    // multiplies (q8_0, q8_K) and a reassociated sum can flip a rounding step.
    bool quantized = false;
    // Layer matrices of F16 or BF16 (none quantized): ggml rounds the inputs
    // it multiplies them with to 16 bits.
    bool half_weights = false;
    std::string file_type;  // as llama-server names it: "Q4_K - Medium", "all F32"
    int64_t n_params = 0;
    uint64_t weight_bytes = 0;  // all ranks together
    uint64_t file_size = 0;
    uint64_t header_digest = 0;  // GgufFile::header_digest(): equal for the same model file
    int32_t tp = 1;
    std::string allreduce;        // engine name
    bool allreduce_bf16 = false;  // some float sums cross its wire in BF16
    std::string shard_plan;       // what each rank holds
    // Every boundary between ranks in every matrix falls on a 16-row tile of
    // ggml's kernels (what makes split-invariant sums bit-identical).
    bool split_tiled = true;
    // What the cached keys and values depend on besides the model file: the
    // RoPE they were rotated with, the cache types. Images (slot files) of
    // equal texts load into each other (an image of every cell into
    // sliding-window layers that keep their window, not the other way).
    std::string kv_format;
};

// What the file says of the model (everything but the ranks' figures, which
// the engine adds once they are loaded); n_cells_per_seq: the cache's, which
// decides LongRoPE's factors.
ModelInfo describe_model(const GgufFile & file, const HParams & hp, const EngineOptions & o, int32_t n_cells_per_seq);

// A LoRA adapter file's own metadata (adapter.lora.task_name and
// prompt_prefix, empty where absent), as /lora-adapters lists it. Throws
// llama_tp::Error naming the file when it cannot be read.
struct LoraAdapterInfo {
    std::string task_name;
    std::string prompt_prefix;
};
LoraAdapterInfo describe_lora_adapter(const std::string & path);

}  // namespace llama_tp
