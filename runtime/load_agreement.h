#pragma once
// What every process of a group must agree on before it loads anything (and
// what a reload after a sleep must find again): the model file, the build,
// the split, the engine, the cache, RoPE, the outputs, the metadata
// overrides, the LoRA adapters. Each is a text; the processes compare them.

#include "runtime/engine_options.h"
#include "runtime/model/gguf_file.h"

#include <memory>
#include <string>
#include <vector>

namespace llama_tp {

std::string setup_agreement(const EngineOptions & o, const GgufFile & file);
std::string adapters_agreement(const EngineOptions & o, const std::vector<std::unique_ptr<GgufFile>> & adapters);
// The digest of the model's tensor data, read whole (tensor_data_digest),
// with the time it took on stderr: equal metadata may still hold other
// weights, or a byte changed by a bad copy.
std::string data_agreement(const GgufFile & file, int n_threads);

}  // namespace llama_tp
