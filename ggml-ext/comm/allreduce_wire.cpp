#include "ggml-ext/comm/allreduce_wire.h"

// These loops run on every byte an allreduce moves: build them for the widest
// vector unit the machine has, chosen once at load time. Not under
// ThreadSanitizer, whose runtime is not ready when load-time choices run.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LLAMA_TP_THREAD_SANITIZER
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define LLAMA_TP_THREAD_SANITIZER
#endif

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(LLAMA_TP_THREAD_SANITIZER)
#define LLAMA_TP_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LLAMA_TP_VECTOR_CLONES
#endif

namespace llama_tp {

LLAMA_TP_VECTOR_CLONES
void wire_copy(float * dst, const float * src, size_t n, WireType wire) {
    if (wire == WireType::F32) {
        if (dst != src && n > 0) std::memmove(dst, src, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; ++i) dst[i] = round_to_bf16(src[i]);
}

LLAMA_TP_VECTOR_CLONES
void wire_add(float * __restrict acc, const float * __restrict src, size_t n, WireType wire) {
    if (wire == WireType::F32) {
        for (size_t i = 0; i < n; ++i) acc[i] += src[i];
        return;
    }
    for (size_t i = 0; i < n; ++i) acc[i] += round_to_bf16(src[i]);
}

LLAMA_TP_VECTOR_CLONES
void wire_copy(double * dst, const double * src, size_t n, WireType) {
    if (dst != src && n > 0) std::memmove(dst, src, n * sizeof(double));
}

LLAMA_TP_VECTOR_CLONES
void wire_add(double * __restrict acc, const double * __restrict src, size_t n, WireType) {
    for (size_t i = 0; i < n; ++i) acc[i] += src[i];
}

}  // namespace llama_tp
