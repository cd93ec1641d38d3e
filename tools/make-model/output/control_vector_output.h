#pragma once
// A control vector GGUF for a model file: a seeded "direction.N" F32 vector
// of the hidden state's width for every layer N >= 1 that takes one (1 to
// the last but one), in the layout upstream's control vector loader reads.

#include <cstdint>
#include <string>

namespace llama_tp::make_model {

struct ControlVectorSpec {
    std::string base_path;  // the model the vector is for
    float stddev = 0.5f;    // of each element
    uint64_t seed = 1;
};

struct ControlVectorResult {
    int64_t n_layers = 0;  // directions written
    int64_t n_embd = 0;
};

// Throws IoError for an unreadable base file, UsageError for a model of one layer.
ControlVectorResult write_control_vector(const std::string & path, const ControlVectorSpec & spec);

}  // namespace llama_tp::make_model
