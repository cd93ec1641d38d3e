#include "server/speculative/draft_pick.h"

#include <cmath>

namespace llama_tp::server {

namespace {
constexpr int kTopK = 10;
}

DraftPick pick_draft(const float * logits, int32_t n_vocab) {
    float top[kTopK];
    int n = 0;
    DraftPick best;
    for (int32_t i = 0; i < n_vocab; ++i) {
        const float v = logits[i];
        if (n == kTopK && v <= top[n - 1]) continue;
        int j = n < kTopK ? n++ : n - 1;
        while (j > 0 && top[j - 1] < v) {
            top[j] = top[j - 1];
            --j;
        }
        top[j] = v;
        if (j == 0) best.token = i;
    }
    double sum = 0.0;
    for (int k = 0; k < n; ++k) sum += std::exp((double) top[k] - (double) top[0]);
    best.p = (float) (1.0 / sum);
    return best;
}

}  // namespace llama_tp::server
