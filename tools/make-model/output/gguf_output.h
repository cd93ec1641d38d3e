#pragma once
// Writing the generated model: the tokenizer copied from a vocabulary GGUF,
// metadata, and tensor data streamed to a temporary file that is renamed into
// place only once complete.

#include "tools/make-model/spec/model_spec.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct gguf_context;

namespace llama_tp::make_model {

struct GgufDeleter {
    void operator()(gguf_context * gguf) const;
};
using GgufPtr = std::unique_ptr<gguf_context, GgufDeleter>;

// The tokenizer of a vocabulary-only GGUF (such as upstream's models/ggml-vocab-*.gguf).
class Vocabulary {
  public:
    explicit Vocabulary(const std::string & path);  // throws IoError

    const std::string & path() const { return path_; }
    int64_t n_tokens() const { return n_tokens_; }
    // Copies every tokenizer.* key (token list, scores, types, merges, special ids, template).
    void copy_tokenizer_keys(gguf_context * dst) const;

  private:
    std::string path_;
    GgufPtr gguf_;
    int64_t n_tokens_ = 0;
};

struct WriteResult {
    uint64_t file_bytes = 0;  // all parts together
    size_t n_tensors = 0;
    std::vector<std::string> paths;  // the files written, first part first
};

// How the tensors are divided among the files of a model: one file when
// max_part_bytes is 0, else parts of at most that much tensor data each, in
// plan order (a tensor bigger than that gets a part of its own).
std::vector<std::vector<size_t>> plan_parts(const std::vector<TensorPlan> & plans, uint64_t max_part_bytes);

// The files of a model written at `path` in n_parts parts: `path` itself for
// one part unless split, else upstream gguf-split's names
// (PATH without .gguf, then -00001-of-0000N.gguf).
std::vector<std::string> part_paths(const std::string & path, size_t n_parts, bool split);

// Size in bytes of the files write_model would produce, all parts together.
uint64_t planned_file_size(const ModelSpec & spec, const Vocabulary & vocab, const std::vector<TensorPlan> & plans,
                           uint64_t max_part_bytes);

// Writes one GGUF file atomically: the metadata of `meta` with the planned
// tensors, each generated from `seed`. Returns the file's size.
uint64_t write_planned_file(const std::string & path, gguf_context * meta, const std::vector<TensorPlan> & plans,
                            uint64_t seed, int n_threads);

// Generates every planned tensor from the spec's seed and writes the GGUF to
// `path` atomically, in parts when max_part_bytes > 0 (the first holds the
// metadata; every part the split.* keys upstream reads). The bytes depend
// only on the inputs, not on n_threads.
WriteResult write_model(const std::string & path, const ModelSpec & spec, const Vocabulary & vocab,
                        const std::vector<TensorPlan> & plans, int n_threads, uint64_t max_part_bytes);

}  // namespace llama_tp::make_model
