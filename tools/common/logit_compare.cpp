#include "tools/common/logit_compare.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace llama_tp {

namespace {

std::vector<double> softmax(const float * logits, int32_t n) {
    const float m = *std::max_element(logits, logits + n);
    std::vector<double> p(n);
    double s = 0.0;
    for (int32_t i = 0; i < n; ++i) s += (p[i] = std::exp((double) logits[i] - m));
    for (double & v : p) v /= s;
    return p;
}

}  // namespace

int32_t LogitCompare::argmax(const float * logits, int32_t n) {
    return (int32_t) (std::max_element(logits, logits + n) - logits);
}

bool LogitCompare::is_near_tie(const float * logits, int32_t n) const {
    std::vector<double> p = softmax(logits, n);
    std::partial_sort(p.begin(), p.begin() + std::min<int32_t>(2, n), p.end(), std::greater<double>());
    return n > 1 && p[0] - p[1] <= near_tie_;
}

bool LogitCompare::add(const float * reference, const float * candidate, int32_t n_vocab) {
    const std::vector<double> p = softmax(reference, n_vocab);
    const std::vector<double> q = softmax(candidate, n_vocab);
    double kl = 0.0, max_diff = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) {
        max_diff = std::max(max_diff, std::fabs(p[i] - q[i]));
        if (p[i] > 0.0) kl += p[i] * (std::log(p[i]) - std::log(std::max(q[i], 1e-300)));
    }
    kl = std::max(kl, 0.0);
    r_.positions++;
    r_.max_abs_prob_diff = std::max(r_.max_abs_prob_diff, max_diff);
    r_.sum_kl += kl;
    r_.max_kl = std::max(r_.max_kl, kl);
    const bool tie = is_near_tie(reference, n_vocab);
    if (tie) {
        r_.near_ties++;
    } else {
        r_.top1_judged++;
        r_.top1_agree += argmax(reference, n_vocab) == argmax(candidate, n_vocab);
    }
    return tie;
}

}  // namespace llama_tp
