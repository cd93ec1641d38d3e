#include "ggml-ext/allreduce_wire.h"

namespace llama_tp {

void wire_copy(float * dst, const float * src, size_t n, WireType wire) {
    if (wire == WireType::F32) {
        if (dst != src) std::memmove(dst, src, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; ++i) dst[i] = round_to_bf16(src[i]);
}

void wire_add(float * __restrict acc, const float * __restrict src, size_t n, WireType wire) {
    if (wire == WireType::F32) {
        for (size_t i = 0; i < n; ++i) acc[i] += src[i];
        return;
    }
    for (size_t i = 0; i < n; ++i) acc[i] += round_to_bf16(src[i]);
}

}  // namespace llama_tp
