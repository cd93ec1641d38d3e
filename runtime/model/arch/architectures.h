#pragma once
// The architectures llama-tp builds, one file each: each maps its GGUF
// metadata onto HParams (shapes, RoPE, windows, experts) and says which
// blocks its layers have (runtime/blocks/blocks.h). Adding an architecture
// made of known blocks is one file here, one line in architectures.cpp and
// its llama-tp-make-model spec.

#include "runtime/model/hparams.h"

#include <string>

namespace llama_tp {

class GgufFile;

// Reads what the architecture adds to the common keys (read_hparams reads
// those first: embedding length, layers, heads, context, norms' epsilon,
// vocabulary). a: the metadata's prefix, the architecture's name.
using ArchitectureReader = void (*)(const GgufFile & file, const std::string & a, HParams & hp);

// The reader of a GGUF architecture name; nullptr for one llama-tp does not build.
ArchitectureReader find_architecture(const std::string & name);
// "llama, qwen2, ...", for the message that refuses one.
std::string architecture_names();

// One per file.
void read_llama(const GgufFile & file, const std::string & a, HParams & hp);
void read_qwen2(const GgufFile & file, const std::string & a, HParams & hp);
void read_qwen3(const GgufFile & file, const std::string & a, HParams & hp);
void read_qwen3moe(const GgufFile & file, const std::string & a, HParams & hp);
void read_phi3(const GgufFile & file, const std::string & a, HParams & hp);
void read_gemma2(const GgufFile & file, const std::string & a, HParams & hp);
void read_gemma3(const GgufFile & file, const std::string & a, HParams & hp);
void read_gemma4(const GgufFile & file, const std::string & a, HParams & hp);
void read_gpt_oss(const GgufFile & file, const std::string & a, HParams & hp);
void read_qwen35(const GgufFile & file, const std::string & a, HParams & hp);
void read_qwen35moe(const GgufFile & file, const std::string & a, HParams & hp);
void read_qwen3next(const GgufFile & file, const std::string & a, HParams & hp);
void read_glm4moe(const GgufFile & file, const std::string & a, HParams & hp);
void read_deepseek2(const GgufFile & file, const std::string & a, HParams & hp);

}  // namespace llama_tp
