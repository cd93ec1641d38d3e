#pragma once
// What a graph's run depends on besides its input values: every node's
// operation, type, shape, strides, parameters (a collective's callback and
// an exact sum's kind among them), the addresses of its data and its
// sources' data, and the types and shapes of sources no node makes. Two runs of graphs with equal fingerprints launch
// the same kernels on the same memory, so a CUDA graph captured from one
// may be replayed for the other.

#include <cstdint>
#include <vector>

#include "ggml.h"

namespace llama_tp {

// Into out (its memory reused: it runs every step).
void graph_fingerprint(ggml_cgraph * gf, std::vector<int64_t> & out);

}  // namespace llama_tp
