#include "runtime/shard/axis.h"

#include "runtime/error.h"
#include "runtime/model/gguf_file.h"

#include <numeric>

#include "ggml.h"

namespace llama_tp {

std::vector<ShardRange> Axis::split(const std::vector<float> & weights) const {
    try {
        return plan_shards(extent, unit, weights);
    } catch (const Error & e) {
        throw Error("cannot split " + what + " across " + std::to_string(weights.size()) + " ranks: " + e.what());
    }
}

int64_t block_of(const GgufFile & file, const std::string & name) {
    const ggml_tensor * t = file.find_tensor(name);
    return t ? ggml_blck_size(t->type) : 1;
}

int64_t block_of_layers(const GgufFile & file, const HParams & hp, const std::string & suffix,
                        const std::function<bool(int)> & pick) {
    int64_t b = 1;
    for (int il = 0; il < hp.n_layer; ++il) {
        if (pick(il)) b = std::lcm(b, block_of(file, hp.tensor_prefix(il) + suffix));
    }
    return b;
}

}  // namespace llama_tp
