#pragma once
// A LoRA adapter GGUF for a model file: a seeded lora_a / lora_b pair for
// every matrix llama-tp applies LoRA to (attention and FFN projections, experts' too,
// the output head), in the layout upstream's llama_adapter_lora_init reads.

#include <cstdint>
#include <string>

#include "ggml.h"

namespace llama_tp::make_model {

struct LoraSpec {
    std::string base_path;  // the model the adapter is for
    int64_t rank = 8;
    float alpha = 0.0f;  // 0: twice the rank
    ggml_type type = GGML_TYPE_F32;
    uint64_t seed = 1;
};

struct LoraResult {
    size_t n_pairs = 0;
    uint64_t file_bytes = 0;
};

// Throws IoError for an unreadable base file, UsageError for a base with
// no matrix to adapt.
LoraResult write_lora_adapter(const std::string & path, const LoraSpec & spec, int n_threads);

}  // namespace llama_tp::make_model
