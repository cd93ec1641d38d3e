#pragma once
// Writes altered copies of a GGUF file for error-path tests.

#include <functional>
#include <string>

struct gguf_context;

namespace llama_tp::test {

// Copies src to dst, letting `edit` change the metadata and `keep` drop tensors.
void copy_gguf(const std::string & src, const std::string & dst, const std::function<void(gguf_context *)> & edit,
               const std::function<bool(const std::string &)> & keep);

// Copies the first n bytes of src to dst.
void truncate_copy(const std::string & src, const std::string & dst, long n);

std::string temp_path(const std::string & name);

}  // namespace llama_tp::test
