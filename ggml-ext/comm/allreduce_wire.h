#pragma once
// The precision values have when they cross between ranks. F32 is exact.
// BF16 keeps 8 significant bits: a value is rounded to nearest, ties to even,
// so its relative error is at most 2^-8 (about 0.4%); NaN stays NaN (quiet),
// infinities stay infinite, and finite values beyond bf16's range become
// infinite. Sums of wire values accumulate in f32.

#include "ggml-ext/comm/allreduce_engine.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

namespace llama_tp {

// x rounded to the nearest bf16 value (ties to even), returned as f32.
inline float round_to_bf16(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    // Adding just under half a bf16 ulp, plus the kept lowest bit, rounds ties to even.
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
    // A NaN keeps its sign and upper payload, made quiet so it cannot round to infinity.
    const uint32_t out = nan ? ((bits | 0x00400000u) & 0xffff0000u) : rounded;
    float y;
    std::memcpy(&y, &out, sizeof y);
    return y;
}

// The wire of one float sum of `bytes` (its F32 values) where the caller
// asked for `asked`: that, or where unset BF16 from bf16_min_bytes on (0: never).
inline WireType wire_of_call(std::optional<WireType> asked, size_t bf16_min_bytes, size_t bytes) {
    if (asked) return *asked;
    return bf16_min_bytes != 0 && bytes >= bf16_min_bytes ? WireType::BF16 : WireType::F32;
}

// Whether an engine choosing by wire_of_call rounds any float sum.
inline bool rounds_any_call(std::optional<WireType> asked, size_t bf16_min_bytes) {
    return asked ? *asked == WireType::BF16 : bf16_min_bytes != 0;
}

// dst[i] = src[i] as it arrives over the wire (dst may equal src).
void wire_copy(float * dst, const float * src, size_t n, WireType wire);

// acc[i] += src[i] as it arrives over the wire.
void wire_add(float * acc, const float * src, size_t n, WireType wire);

// Doubles cross the wire exactly; the wire type is ignored.
void wire_copy(double * dst, const double * src, size_t n, WireType wire);
void wire_add(double * acc, const double * src, size_t n, WireType wire);

}  // namespace llama_tp
