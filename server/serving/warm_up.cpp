#include "server/serving/warm_up.h"

#include "runtime/error.h"
#include "runtime/text/tokenizer.h"

#include <cmath>

namespace llama_tp::server {
namespace {

// The first value of n that is not a finite number, or -1.
int64_t first_not_finite(const float * values, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(values[i])) return i;
    }
    return -1;
}

}  // namespace

void warm_up(Engine & engine) {
    const std::string file = "model file '" + engine.options().model_path + "'";
    const int32_t bos = engine.tokenizer().bos();
    Batch batch;
    batch.add(bos >= 0 ? bos : 0, 0, 0, true);
    try {
        engine.decode(batch);
    } catch (const std::exception & e) {
        throw Error(file + ": the warm-up step failed: " + e.what());
    }
    const bool embeddings = engine.options().embeddings;
    const float * out = embeddings ? engine.embedding(0) : engine.logits(0);
    const int64_t n = embeddings ? engine.info().n_embd : engine.info().n_vocab;
    const int64_t bad = out ? first_not_finite(out, n) : -1;
    engine.seq_remove(0, 0, -1);
    if (bad >= 0) {
        throw Error(file + ": the warm-up step gave " + std::to_string(out[bad]) + " at " +
                    (embeddings ? "embedding value " : "the logit of token ") + std::to_string(bad) +
                    ": the weights hold values that are not numbers");
    }
}

}  // namespace llama_tp::server
