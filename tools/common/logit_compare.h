#pragma once
// Accumulates how far one set of next-token distributions is from a
// reference: softmax difference, KL divergence, top-1 agreement. Positions
// where the reference's top-2 margin is a near-tie are counted apart, because
// float reassociation may legitimately flip them.

#include <cstdint>
#include <string>

namespace llama_tp {

struct LogitCompareResult {
    int64_t positions = 0;
    int64_t near_ties = 0;
    int64_t top1_judged = 0;  // positions outside near-ties
    int64_t top1_agree = 0;
    double max_abs_prob_diff = 0.0;
    double sum_kl = 0.0;
    double max_kl = 0.0;

    double top1_agreement() const { return top1_judged ? (double) top1_agree / (double) top1_judged : 1.0; }
    double mean_kl() const { return positions ? sum_kl / (double) positions : 0.0; }
};

class LogitCompare {
  public:
    static constexpr double kNearTieMargin = 1e-4;

    // near_tie: the reference's top-2 probability margin at or below which a
    // position is a near-tie.
    explicit LogitCompare(double near_tie = kNearTieMargin) : near_tie_(near_tie) {}

    // Adds one position; returns true when it is a near-tie in the reference.
    bool add(const float * reference, const float * candidate, int32_t n_vocab);
    const LogitCompareResult & result() const { return r_; }

    // Index of the largest logit, and whether the top-2 probability margin
    // of these logits is at or below the near-tie margin.
    static int32_t argmax(const float * logits, int32_t n);
    bool is_near_tie(const float * logits, int32_t n) const;

  private:
    double near_tie_;
    LogitCompareResult r_;
};

}  // namespace llama_tp
