#pragma once
// What a graph's run depends on besides its input values: every node's
// operation, type, shape, strides, parameters (a collective's callback and
// an exact sum's kind among them), the addresses of its data and its
// sources' data, and its sources' types and shapes. Two runs of graphs with equal fingerprints launch
// the same kernels on the same memory, so a CUDA graph captured from one
// may be replayed for the other.

#include <cstdint>
#include <vector>

#include "ggml.h"

namespace llama_tp {

std::vector<int64_t> graph_fingerprint(ggml_cgraph * gf);

}  // namespace llama_tp
