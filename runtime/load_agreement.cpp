#include "runtime/load_agreement.h"

#include "runtime/model/data_digest.h"

#include <chrono>
#include <cstdio>

namespace llama_tp {
namespace {

// The RoPE overrides, for the processes of a launch to agree on.
std::string rope_text(const EngineOptions & o) {
    const RopeOverrides & r = o.rope;
    if (!r.any()) return "rope: the model's\n";
    char text[256];
    std::snprintf(text, sizeof text, "rope: scaling %d, base %g, scale %g, orig %d, yarn %g %g %g %g\n",
                  r.scaling ? (int) *r.scaling : -1, r.freq_base, r.freq_scale, r.yarn_orig_ctx, r.yarn_ext_factor,
                  r.yarn_attn_factor, r.yarn_beta_fast, r.yarn_beta_slow);
    return text;
}

std::string wire_text(const EngineOptions & o) {
    if (!o.allreduce_wire) return ", the engine's wire";
    return *o.allreduce_wire == WireType::BF16 ? ", bf16 wire" : ", f32 wire";
}

std::string overrides_text(const EngineOptions & o) {
    std::string s;
    for (const MetadataOverride & m : o.metadata_overrides) s += "metadata override: " + m.describe() + "\n";
    return s;
}

}  // namespace

std::string setup_agreement(const EngineOptions & o, const GgufFile & file) {
    char digest[32];
    std::snprintf(digest, sizeof digest, "%016llx", (unsigned long long) file.header_digest());
    std::string split;
    for (float w : o.tensor_split) split += (split.empty() ? "" : ",") + std::to_string(w);
    return "model: " + std::to_string(file.file_size()) + " bytes, header digest " + digest + "\n" +
           "build: " + LLAMA_TP_BUILD_ID + "\n" + "ranks per process: " + std::to_string(o.tp) + "\n" +
           "tensor split: " + (split.empty() ? "even" : split) + "\n" + "allreduce: " + o.allreduce + wire_text(o) +
           "\n" + "split-invariant: " + (o.split_invariant ? (*o.split_invariant ? "yes" : "no") : "where free") +
           "\n" + "context: " + std::to_string(o.n_ctx) + " cells, " + std::to_string(o.n_seq_max) + " sequences, " +
           (o.kv_unified ? "unified" : "per sequence") + (o.swa_full ? ", swa full" : "") +
           (o.draft_states ? ", draft states" : "") + ", k " + kv_type_name(o.kv_types.k) + ", v " +
           kv_type_name(o.kv_types.v) + "\n" + "batch: " + std::to_string(o.n_batch) + "\n" + rope_text(o) +
           "outputs: " + (o.embeddings ? "embeddings" : "logits") + "\n" + overrides_text(o);
}

std::string adapters_agreement(const EngineOptions & o, const std::vector<std::unique_ptr<GgufFile>> & adapters) {
    std::string s;
    for (size_t i = 0; i < adapters.size(); ++i) {
        char digest[32];
        std::snprintf(digest, sizeof digest, "%016llx", (unsigned long long) adapters[i]->header_digest());
        s += "lora: " + std::to_string(adapters[i]->file_size()) + " bytes, header digest " + digest + ", scale " +
             std::to_string(o.loras[i].scale) + "\n";
    }
    return s;
}

std::string data_agreement(const GgufFile & file, int n_threads) {
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t digest = tensor_data_digest(file, n_threads);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t bytes = 0;
    for (int p = 0; p < file.n_parts(); ++p) bytes += file.part_data(p).end - file.part_data(p).begin;
    std::fprintf(stderr, "llama-tp: tensor data digest %016llx: %.2f GB read in %.2f s (%.2f GB/s)\n",
                 (unsigned long long) digest, bytes / 1e9, s, s > 0 ? bytes / 1e9 / s : 0.0);
    char text[96];
    std::snprintf(text, sizeof text, "tensor data: %llu bytes, digest %016llx\n", (unsigned long long) bytes,
                  (unsigned long long) digest);
    return text;
}

}  // namespace llama_tp
