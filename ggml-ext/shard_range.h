#pragma once
// How one axis of a tensor is divided among ranks: each rank owns one
// contiguous, non-empty range of that axis, and every boundary falls on a
// multiple of a granularity (a head size, a quantization block) so that no
// rank receives part of an indivisible unit.

#include <cstdint>
#include <vector>

namespace llama_tp {

// The half-open range [begin, end) of an axis owned by one rank.
struct ShardRange {
    int64_t begin = 0;
    int64_t end = 0;

    int64_t size() const { return end - begin; }
};

// Splits [0, extent) into weights.size() contiguous ranges, in rank order,
// with sizes proportional to the weights (equal weights: an even split).
// Boundaries are the cumulative proportional positions rounded to the nearest
// multiple of granularity; a rank whose share rounds to nothing still gets one
// unit of granularity. Deterministic: the same inputs give the same plan.
// Throws llama_tp::Error when extent is not a multiple of granularity, a
// weight is not positive, or there are more ranks than units of granularity.
std::vector<ShardRange> plan_shards(int64_t extent, int64_t granularity, const std::vector<float> & weights);

}  // namespace llama_tp
