#pragma once
// llama-server's own completion shape (/completion, /completions): the text,
// the token ids, why it stopped, the request's settings and timings; stream
// events are objects of the same kind, the last one with "stop": true.

#include "server/request.h"
#include "server/response.h"
#include "server/task.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace llama_tp::server {

using json = nlohmann::json;

// The settings a request generates with, as llama-server reports them.
json native_settings(const GenerationRequest & gr, int32_t n_predict);

json native_final(const ResponseContext & ctx, const std::string & content, const std::vector<int32_t> & tokens,
                  const std::vector<TokenLogprob> & probs, const TaskEvent & done);

json native_chunk(const ResponseContext & ctx, const TaskEvent & text);

}  // namespace llama_tp::server
