#pragma once
// The accuracy contract (DESIGN section 4) as bounds for one comparison:
// which clause applies follows from the reference, the sums, the wire and
// the model's weights, so a verdict needs no hand-set bounds.

#include "runtime/kv/kv_cache.h"
#include "runtime/model_info.h"

#include <string>

namespace llama_tp {

struct AccuracyBounds {
    std::string clause;        // the contract clause these bounds come from
    double near_tie = 1e-4;    // top-2 margin at or below which top-1 is not judged
    double max_abs_dp = -1.0;  // < 0: not judged
    double max_mean_kl = -1.0;
    double min_top1 = 1.0;  // share of judged positions whose top-1 must agree; 0: reported only
    bool greedy = true;     // greedy continuation identical outside near-ties
};

struct ComparedRun {
    bool reference_upstream = false;  // against upstream llama_decode; else llama-tp on one device
    bool split_invariant = false;
    bool bf16_wire = false;
    // The ranks' products run on a GPU (ggml's CUDA kernels), not the CPU.
    bool gpu = false;
    // Against llama-tp on one device with an F16 cache: what the cache types cost.
    bool reference_f16_kv = false;
    KvTypes kv_types;
};

AccuracyBounds contract_bounds(const ComparedRun & run, const ModelInfo & model);

}  // namespace llama_tp
