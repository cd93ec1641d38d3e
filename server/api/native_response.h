#pragma once
// llama-server's own completion shape (/completion, /completions): the text,
// the token ids, why it stopped, the request's settings and timings; stream
// events are objects of the same kind, the last one with "stop": true.

#include "server/api/request.h"
#include "server/api/response.h"
#include "server/serving/task.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace llama_tp::server {

using json = nlohmann::json;

// Sampling settings as llama-server reports them (/props, generation_settings).
json sampling_settings_json(const SamplingParams & s, int32_t n_predict, bool ignore_eos);

// The settings a request generates with (n_predict and n_keep as the task has them).
json native_settings(const GenerationRequest & gr, int32_t n_predict, int32_t n_keep);

json native_final(const ResponseContext & ctx, const std::string & content, const std::vector<int32_t> & tokens,
                  const std::vector<TokenLogprob> & probs, const TaskEvent & done);

json native_chunk(const ResponseContext & ctx, const TaskEvent & text);

}  // namespace llama_tp::server
