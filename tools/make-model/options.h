#pragma once
// Command-line options of llama-tp-make-model.

#include "tools/make-model/output/control_vector_output.h"
#include "tools/make-model/output/lora_output.h"
#include "tools/make-model/spec/model_spec.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llama_tp::make_model {

struct Options {
    ModelSpec spec;
    std::string output_path;
    std::string vocab_path;          // empty: the architecture's default, found beside the executable
    std::string chat_template_path;  // empty: the architecture's default template, if any
    int n_threads = 0;               // 0: one per hardware thread
    uint64_t split_max_bytes = 0;    // 0: one file; else parts of at most this much tensor data
    bool help = false;
    bool dry_run = false;  // print the plan and file size, write nothing
    // --lora-of: a LoRA adapter for that model instead of a model.
    LoraSpec lora;
    // --control-vector-of: a control vector for that model instead of a model.
    ControlVectorSpec control_vector;
};

// Throws UsageError on anything malformed or inconsistent.
Options parse_options(const std::vector<std::string> & args);
std::string usage_text(const std::string & program);

}  // namespace llama_tp::make_model
