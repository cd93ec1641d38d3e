#pragma once
// A reranker's classification head (cls.output.weight, as upstream's
// converter writes Qwen3-Reranker: the rows of "yes" and "no"). It is a few
// rows over the final hidden state, so process 0 applies it, unsplit, to the
// state a prompt pools to; the ranks only compute that state.

#include "runtime/model/gguf_file.h"
#include "runtime/model/hparams.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace llama_tp {

struct ClassifierHead {
    int32_t n_embd = 0;
    std::vector<float> weight;  // n_out rows of n_embd
    std::vector<float> bias;    // n_out, or empty
    // Qwen3's rerankers score the last token and turn the rows into
    // probabilities; upstream's other rank models score the first token.
    bool last_token = false;
    bool softmax = false;

    int32_t n_out() const { return n_embd > 0 ? (int32_t) (weight.size() / n_embd) : 0; }
    // The head's outputs for one hidden state of n_embd floats.
    std::vector<float> apply(const float * hidden) const;

    // nullopt when the file has no cls.output.weight; throws llama_tp::Error
    // when it has one of the wrong shape or a type ggml cannot read.
    static std::optional<ClassifierHead> read(const GgufFile & file, const HParams & hp);
};

}  // namespace llama_tp
