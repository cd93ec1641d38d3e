#pragma once
// The sizes at which the GPU engines change how they sum, with the
// environment's overrides (README: "Ranks on devices"). Byte counts are of a
// call's F32 values; a value takes a K, M or G suffix (powers of 1024).

#include <cstddef>
#include <string>

namespace llama_tp {

class Environment;

struct GpuAllReduceSizes {
    // Where the caller leaves the wire to the engine: float sums of at least
    // this many bytes go on a BF16 wire, smaller ones in F32; 0: always F32.
    // LLAMA_TP_NCCL_BF16_MIN_BYTES; LLAMA_TP_INTERNAL_BF16_MIN_BYTES, or
    // upstream's GGML_CUDA_AR_BF16_THRESHOLD (the same meaning).
    size_t nccl_bf16_min_bytes = size_t(64) << 10;  // smaller calls are bound by latency, not bytes
    size_t internal_bf16_min_bytes = 1;             // PCIe through host memory: every call
    // The internal engine's sums of at least this many wire bytes go through
    // the GPUs' copy engines in chunks (0: never), smaller ones through one
    // kernel per GPU. LLAMA_TP_INTERNAL_COPY_MIN_BYTES, or upstream's
    // GGML_CUDA_AR_COPY_THRESHOLD.
    size_t internal_copy_min_bytes = size_t(1) << 20;
    // Their chunk size; 0: by the call's size (a quarter of it, within
    // [512 KiB, 2 MiB]). At least kMinCopyChunkBytes otherwise.
    // LLAMA_TP_INTERNAL_COPY_CHUNK_BYTES, or GGML_CUDA_AR_COPY_CHUNK_BYTES.
    size_t internal_copy_chunk_bytes = 0;

    static constexpr size_t kMinCopyChunkBytes = size_t(64) << 10;

    // The defaults with the environment's overrides (ours before upstream's).
    // Throws llama_tp::Error naming the variable for a value that is not a
    // byte count, or a chunk size below kMinCopyChunkBytes.
    static GpuAllReduceSizes from(const Environment & env);
    static GpuAllReduceSizes from_env();  // the process's environment

    // The copy engines' chunk for a call of wire_bytes.
    size_t copy_chunk_bytes(size_t wire_bytes) const;
};

// "1048576", "1M", "512K" as a byte count; throws llama_tp::Error naming `what`.
size_t parse_byte_count(const std::string & text, const std::string & what);

}  // namespace llama_tp
