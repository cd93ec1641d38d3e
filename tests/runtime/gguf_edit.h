#pragma once
// Writes altered copies of a GGUF file for error-path tests.

#include <cstdint>
#include <functional>
#include <string>

struct gguf_context;
struct ggml_context;

namespace llama_tp::test {

// Copies src to dst, letting `edit` change the metadata, `keep` drop tensors
// and `change_data` the tensors' values.
void copy_gguf(const std::string & src, const std::string & dst, const std::function<void(gguf_context *)> & edit,
               const std::function<bool(const std::string &)> & keep,
               const std::function<void(ggml_context *)> & change_data = nullptr);

// Copies src to dst with element i of the F32 tensor `name` set to value.
void copy_gguf_with_value(const std::string & src, const std::string & dst, const std::string & name, int64_t i,
                          float value);

// Copies the first n bytes of src to dst.
void truncate_copy(const std::string & src, const std::string & dst, long n);

std::string temp_path(const std::string & name);

}  // namespace llama_tp::test
