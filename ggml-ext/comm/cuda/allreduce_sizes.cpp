#include "ggml-ext/comm/cuda/allreduce_sizes.h"

#include "ggml-ext/environment.h"
#include "ggml-ext/error.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>

namespace llama_tp {
namespace {

// The first of the variables that is set (and not empty) overrides value.
void override_from(size_t & value, const Environment & env, std::initializer_list<const char *> variables) {
    for (const char * variable : variables) {
        const std::string text = env.get(variable);
        if (!text.empty()) {
            value = parse_byte_count(text, variable);
            return;
        }
    }
}

}  // namespace

size_t parse_byte_count(const std::string & text, const std::string & what) {
    const auto fail = [&] {
        return Error(what + " must be a byte count (digits, optionally followed by K, M or G), not '" + text + "'");
    };
    size_t digits = 0;
    while (digits < text.size() && std::isdigit((unsigned char) text[digits])) ++digits;
    if (digits == 0 || digits > 15) throw fail();
    unsigned long long value = std::strtoull(text.substr(0, digits).c_str(), nullptr, 10);
    const std::string suffix = text.substr(digits);
    int shift = 0;
    if (suffix == "K" || suffix == "k")
        shift = 10;
    else if (suffix == "M" || suffix == "m")
        shift = 20;
    else if (suffix == "G" || suffix == "g")
        shift = 30;
    else if (!suffix.empty())
        throw fail();
    if (value > (std::numeric_limits<unsigned long long>::max() >> shift)) throw fail();
    return (size_t) (value << shift);
}

GpuAllReduceSizes GpuAllReduceSizes::from_env() {
    return from(Environment::of_process());
}

GpuAllReduceSizes GpuAllReduceSizes::from(const Environment & env) {
    GpuAllReduceSizes s;
    override_from(s.nccl_bf16_min_bytes, env, {"LLAMA_TP_NCCL_BF16_MIN_BYTES"});
    override_from(s.internal_bf16_min_bytes, env, {"LLAMA_TP_INTERNAL_BF16_MIN_BYTES", "GGML_CUDA_AR_BF16_THRESHOLD"});
    override_from(s.internal_copy_min_bytes, env, {"LLAMA_TP_INTERNAL_COPY_MIN_BYTES", "GGML_CUDA_AR_COPY_THRESHOLD"});
    override_from(s.internal_copy_chunk_bytes, env,
                  {"LLAMA_TP_INTERNAL_COPY_CHUNK_BYTES", "GGML_CUDA_AR_COPY_CHUNK_BYTES"});
    if (s.internal_copy_chunk_bytes != 0 && s.internal_copy_chunk_bytes < kMinCopyChunkBytes) {
        throw Error(
            "the internal engine's copy chunk (LLAMA_TP_INTERNAL_COPY_CHUNK_BYTES or "
            "GGML_CUDA_AR_COPY_CHUNK_BYTES) must be 0 (by size) or at least 64K, not " +
            std::to_string(s.internal_copy_chunk_bytes) + " bytes");
    }
    return s;
}

size_t GpuAllReduceSizes::copy_chunk_bytes(size_t wire_bytes) const {
    if (internal_copy_chunk_bytes != 0) return std::max(internal_copy_chunk_bytes, kMinCopyChunkBytes);
    return std::clamp(wire_bytes / 4, size_t(512) << 10, size_t(2) << 20);
}

}  // namespace llama_tp
