#pragma once
// One step of one token at load, before /health says ok (llama-server's
// warm-up, on by default, --no-warmup skips it): a model that cannot decode,
// or decodes to values that are not numbers, fails at start instead of on
// the first request, and that request does not wait for the first graph.

#include "runtime/engine.h"

namespace llama_tp::server {

// Decodes the model's BOS token (token 0 where it has none) as sequence 0
// and removes it again. Throws llama_tp::Error naming the model file and
// what went wrong.
void warm_up(Engine & engine);

}  // namespace llama_tp::server
