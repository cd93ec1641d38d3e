#pragma once
// How many leading tokens two token lists share.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace llama_tp::server {

inline size_t common_prefix(const std::vector<int32_t> & a, const std::vector<int32_t> & b) {
    const size_t n = std::min(a.size(), b.size());
    return static_cast<size_t>(std::mismatch(a.begin(), a.begin() + (long) n, b.begin()).first - a.begin());
}

}  // namespace llama_tp::server
