#pragma once
// How a draft model picks its proposal from its logits, as upstream's draft
// sampler does: the 10 most likely tokens are kept and the first taken; its
// probability among those ten is what --spec-draft-p-min bounds.

#include <cstdint>

namespace llama_tp::server {

struct DraftPick {
    int32_t token = -1;
    float p = 0.0f;  // among the ten most likely
};

DraftPick pick_draft(const float * logits, int32_t n_vocab);

}  // namespace llama_tp::server
