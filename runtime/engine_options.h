#pragma once
// What a caller asks of the runtime when it loads a model (Engine::load):
// the model, the cache, the ranks and how their sums are made. The runtime
// resolves the rest once at load (runtime/plan/runtime_plan.h).

#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/environment.h"
#include "runtime/kv/kv_cache.h"
#include "runtime/model/control_vector.h"
#include "runtime/model/gguf_file.h"
#include "runtime/model/hparams.h"
#include "runtime/ranks/rank_devices.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llama_tp {

class ProcessGroup;

// A LoRA adapter GGUF and the scale its changes get where a batch gives none.
struct LoraOptions {
    std::string path;
    float scale = 1.0f;
};

struct EngineOptions {
    std::string model_path;
    int32_t n_ctx = 4096;   // KV cells, shared by all sequences; 0: the model's training context
    int32_t n_seq_max = 1;  // sequences (server slots) that can be live at once
    // false: each sequence owns n_ctx / n_seq_max cells and attends over those
    // only, decode tokens through llama-tp's attention kernel; true: one pool
    // of cells for all sequences and ggml's attention throughout, which gives
    // exactly upstream's numbers (upstream's kv_unified).
    bool kv_unified = false;
    // Element types of the cached keys and values (-ctk / -ctv). Anything but
    // F16 goes through ggml's attention kernel in both layouts.
    KvTypes kv_types;
    // Outputs are the final-normed hidden states (embedding(), n_embd floats
    // a row) instead of logits.
    bool embeddings = false;
    // Besides the logits, every batch row's final-normed hidden state
    // (Engine::hidden): what a multi-token-prediction head reads.
    bool keep_hidden = false;
    // The model of the file's multi-token-prediction layer instead of its
    // trunk (HParams::mtp_head): Batch::embd carries each token's hidden
    // state of the position before it. Its cache is that one layer's.
    bool mtp_head = false;
    // RoPE settings that replace the model's (llama-server's --rope-* and --yarn-*).
    RopeOverrides rope;
    int32_t n_batch = 512;  // most tokens one decode() call accepts
    // Sliding-window layers keep every cell of the context (llama-server's
    // --swa-full) instead of their window and a batch (KvPoolSizes).
    bool swa_full = false;
    // Linear attention keeps a second state per sequence, where
    // Engine::seq_save_state puts it before a draft is checked, so that a
    // rejected draft takes the sequence back instead of losing its state
    // (speculative decoding on recurrent models). No effect on other models.
    bool draft_states = false;
    int32_t n_threads = 0;  // 0: all cores
    // Another engine of this process computes on the same cores between this
    // one's steps (a draft model): the CPU ranks' threads then sleep between
    // graphs instead of polling, so that the two pools do not spin against
    // each other.
    bool shares_cores = false;
    DeviceOptions devices;  // where the ranks run (-dev, -ngl)
    // Every rank's graph takes ggml's operations only, as on a GPU, even on
    // the CPU: ggml's attention, float sums, collectives between graph
    // segments through host memory. For checking the GPU ranks' path on any
    // machine.
    bool portable_graph = false;
    bool progress = true;  // load progress on stderr for large files
    // Every weight value read is checked, and a NaN, an infinity or a bad
    // block scale stops the load naming the tensor (--check-tensors).
    bool check_tensors = false;
    // LoRA adapters of the model (at most 64), split as the matrices they
    // change; Batch::lora scales them token by token.
    std::vector<LoraOptions> loras;
    // Metadata read in place of the model file's (--override-kv).
    std::vector<MetadataOverride> metadata_overrides;
    // Control vectors, summed at their scales, added to the outputs of the
    // layers in range on every rank (runtime/model/control_vector.h).
    std::vector<ControlVectorOptions> control_vectors;
    ControlVectorRange control_range;

    // Tensor parallelism: tp ranks in this process (threads), times the
    // processes of an MPI launch (join_launched_processes(); nullptr: this
    // process alone). Process p holds ranks [p * tp, p * tp + tp).
    int32_t tp = 1;
    ProcessGroup * processes = nullptr;
    std::vector<float> tensor_split;  // empty: even
    std::string allreduce = "auto";   // --allreduce; "auto" honours LLAMA_TP_ALLREDUCE
    // The float sums' wire: --bf16-wire, --f32-wire; unset: the engine's
    // (F32 in host memory, BF16 from a size on between GPUs). Split-invariant
    // sums take F32 whatever is asked.
    std::optional<WireType> allreduce_wire;
    // Results that do not depend on the split: the row-parallel products are
    // summed on a reduction grid fixed by the model and added exactly, so
    // every --tp and -ts on the grid, one device included, gives the same
    // logits (ShardPlan); F64 crosses the wire. false: ggml's float sums
    // (--no-split-invariant), upstream's numbers on one device. Unset: on
    // where it costs nothing, when every row-parallel matrix of the model is
    // multiplied in one pass (ModelWeights::row_parallel_in_one_pass) and the
    // wire is not BF16 (which rounds the sums); the engine decides at load.
    std::optional<bool> split_invariant;
    // The mode in use, once the engine has decided (Engine::options()).
    bool exact_sums() const { return split_invariant.value_or(false); }
    // With split-invariant sums, every other dense matrix of a type the
    // one-pass kernel takes (q8_0, q4_0, the K-quants, IQ4_XS: attention and FFN
    // projections, the output head) is multiplied by it too, with one cell:
    // each output then depends on its own row and token only, so such a
    // model's logits are the same in any batch. Unset: where that kernel is
    // faster than ggml's products on this CPU for every such type of the
    // model (ggml_ext_exact_matmul_preferred), or as LLAMA_TP_ONE_PASS_PRODUCTS
    // (1 or 0) says; the engine decides at load.
    std::optional<bool> one_pass_products;
    // The variables the runtime reads (LLAMA_TP_*, upstream's GGML_CUDA_*
    // names; README: "Ranks on devices"). Unset: the process's, read once
    // at load.
    std::optional<Environment> environment;
};

}  // namespace llama_tp
