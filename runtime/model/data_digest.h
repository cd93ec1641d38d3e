#pragma once
// A digest of a model's tensor data, for the processes of a group to prove
// they hold the same weights: every byte after each part's header, hashed in
// fixed chunks by several threads and the chunks' digests joined in order,
// so the result depends on the bytes only. A checksum against files that
// differ by accident (a copy cut short, another quantization, one changed
// byte), not against a file made to collide.

#include <cstddef>
#include <cstdint>

namespace llama_tp {

class GgufFile;

// The 64-bit digest of n bytes.
uint64_t digest_bytes(const void * data, size_t n, uint64_t seed);

// Every part's tensor data, read with n_threads threads. Throws
// llama_tp::Error naming the part on a failed read.
uint64_t tensor_data_digest(const GgufFile & file, int n_threads);

}  // namespace llama_tp
