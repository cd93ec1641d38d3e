#include "ggml-ext/shard_range.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "ggml-ext/error.h"

namespace llama_tp {

namespace {

void check_extent(int64_t extent, int64_t granularity) {
    if (granularity <= 0) {
        throw Error("cannot plan shards with granularity " + std::to_string(granularity) +
                    ": granularity must be positive (use 1 for no constraint)");
    }
    if (extent <= 0) {
        throw Error("cannot split an extent of " + std::to_string(extent) + ": the extent must be positive");
    }
    if (extent % granularity != 0) {
        throw Error("cannot split an extent of " + std::to_string(extent) + " in units of " +
                    std::to_string(granularity) + ": the extent must be a multiple of the granularity");
    }
}

void check_weights(const std::vector<float> & weights) {
    if (weights.empty()) {
        throw Error("cannot split across 0 ranks: give one weight per rank (all 1 for an even split)");
    }
    for (size_t rank = 0; rank < weights.size(); ++rank) {
        const float weight = weights[rank];
        if (!std::isfinite(weight) || weight <= 0.0f) {
            std::ostringstream message;
            message << "weight of rank " << rank << " is " << weight
                    << ": every rank needs a positive, finite weight (all 1 for an even split)";
            throw Error(message.str());
        }
    }
}

void check_rank_count(int64_t units, int64_t granularity, size_t n_ranks) {
    if (units < static_cast<int64_t>(n_ranks)) {
        throw Error("cannot split " + std::to_string(units) + " units of " + std::to_string(granularity) + " across " +
                    std::to_string(n_ranks) + " ranks: at most " + std::to_string(units) +
                    " ranks (every rank needs at least one unit)");
    }
}

// Boundary i (in units) between rank i-1 and rank i, before clamping.
std::vector<int64_t> proportional_boundaries(int64_t units, const std::vector<float> & weights) {
    double total = 0.0;
    for (float weight : weights) {
        total += weight;
    }
    std::vector<int64_t> boundaries(weights.size() + 1);
    double cumulative = 0.0;
    boundaries[0] = 0;
    for (size_t i = 1; i < weights.size(); ++i) {
        cumulative += weights[i - 1];
        boundaries[i] = std::llround(static_cast<double>(units) * cumulative / total);
    }
    boundaries[weights.size()] = units;
    return boundaries;
}

// Moves each inner boundary just enough that every range keeps at least one
// unit; possible because there are at least as many units as ranks.
void clamp_to_non_empty(std::vector<int64_t> & boundaries) {
    const int64_t n_ranks = static_cast<int64_t>(boundaries.size()) - 1;
    const int64_t units = boundaries.back();
    for (int64_t i = 1; i < n_ranks; ++i) {
        const int64_t lowest = boundaries[i - 1] + 1;
        const int64_t highest = units - (n_ranks - i);
        boundaries[i] = std::min(std::max(boundaries[i], lowest), highest);
    }
}

}  // namespace

std::vector<ShardRange> plan_shards(int64_t extent, int64_t granularity, const std::vector<float> & weights) {
    check_extent(extent, granularity);
    check_weights(weights);
    const int64_t units = extent / granularity;
    check_rank_count(units, granularity, weights.size());

    std::vector<int64_t> boundaries = proportional_boundaries(units, weights);
    clamp_to_non_empty(boundaries);

    std::vector<ShardRange> ranges(weights.size());
    for (size_t rank = 0; rank < ranges.size(); ++rank) {
        ranges[rank] = ShardRange{boundaries[rank] * granularity, boundaries[rank + 1] * granularity};
    }
    return ranges;
}

}  // namespace llama_tp
