#include "ggml-ext/comm/allreduce_failure.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace llama_tp {
namespace {

// "30.0" for whole and tenth seconds, more digits only where they matter ("0.05").
std::string format_seconds(double seconds) {
    char text[32];
    const bool tenths = std::fabs(seconds * 10 - std::round(seconds * 10)) < 1e-9;
    std::snprintf(text, sizeof text, tenths ? "%.1f" : "%.3g", seconds);
    return text;
}

}  // namespace

std::string FailureRecord::message() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return message_.empty() ? std::string("allreduce: the rank group failed") : message_;
}

std::string missing_ranks_message(const std::vector<int> & missing, double timeout_s, int n_ranks) {
    std::string who = missing.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < missing.size(); ++i) {
        who += (i ? ", " : "") + std::to_string(missing[i]);
    }
    return "allreduce: " + who + " did not arrive within " + format_seconds(timeout_s) + " s (group of " +
           std::to_string(n_ranks) + ")";
}

std::string call_mismatch(const RankCall & mine, const RankCall & theirs) {
    if (mine.element_size != theirs.element_size) {
        return mismatched_types_message({{mine.rank, mine.element_size}, {theirs.rank, theirs.element_size}});
    }
    if (mine.n != theirs.n) return mismatched_counts_message({{mine.rank, mine.n}, {theirs.rank, theirs.n}});
    return "";
}

std::string mismatched_counts_message(std::vector<std::pair<int, size_t>> rank_counts) {
    std::sort(rank_counts.begin(), rank_counts.end());
    std::string list;
    for (const auto & [rank, count] : rank_counts) {
        list += (list.empty() ? "rank " : ", rank ") + std::to_string(rank) + ": " + std::to_string(count);
    }
    return "allreduce: ranks called with different element counts (" + list + ")";
}

std::string mismatched_types_message(std::vector<std::pair<int, size_t>> rank_sizes) {
    std::sort(rank_sizes.begin(), rank_sizes.end());
    std::string list;
    for (const auto & [rank, size] : rank_sizes) {
        list += (list.empty() ? "rank " : ", rank ") + std::to_string(rank) + ": f" + std::to_string(size * 8);
    }
    return "allreduce: ranks called with different element types (" + list + ")";
}

std::string bad_rank_message(int rank, int n_ranks) {
    return "allreduce: rank " + std::to_string(rank) + " is out of range for a group of " + std::to_string(n_ranks);
}

}  // namespace llama_tp
