#pragma once
// What a loaded model is, for logs, /v1/models and /props.

#include <cstdint>
#include <string>

namespace llama_tp {

struct ModelInfo {
    std::string path;
    std::string name;          // general.name, or the file name
    std::string architecture;  // general.architecture
    int32_t n_vocab = 0;
    int32_t n_ctx_train = 0;
    int32_t n_embd = 0;
    int32_t n_layer = 0;
    int32_t n_head = 0;
    int32_t n_head_kv = 0;
    int64_t n_params = 0;
    uint64_t weight_bytes = 0;  // all ranks together
    int32_t tp = 1;
    std::string allreduce;   // engine name
    std::string shard_plan;  // what each rank holds
};

}  // namespace llama_tp
