#pragma once
// Control vectors (llama-server's --control-vector): a direction added to the
// hidden state at the end of a layer, read from GGUF files of "direction.N"
// F32 tensors, one per layer N >= 1, and summed file by file at their
// scales, as upstream does. The hidden state is whole on every rank after
// the layer's last collective, so every rank adds the whole direction.

#include <cstdint>
#include <string>
#include <vector>

namespace llama_tp {

struct ControlVectorOptions {
    std::string path;
    float scale = 1.0f;
};

// Where the directions apply: layers [first, last], both inclusive, as
// upstream's --control-vector-layer-range (<= 0: layer 1, the last layer).
struct ControlVectorRange {
    int32_t first = -1;
    int32_t last = -1;
};

class ControlVector {
  public:
    // Reads and sums the files for a model of n_layer layers of width n_embd.
    // Throws llama_tp::Error naming the file and tensor on a tensor that is
    // not "direction.N" (N >= 1), not F32, not 1-D or not n_embd wide.
    ControlVector(const std::vector<ControlVectorOptions> & files, int32_t n_layer, int64_t n_embd,
                  ControlVectorRange range);

    // The direction added after layer il (n_embd floats); nullptr where none is.
    const float * layer(int32_t il) const;
    bool empty() const;
    // What it adds, for the processes of a group to agree on.
    std::string describe() const;

  private:
    std::vector<std::vector<float>> layers_;  // empty where nothing is added
};

}  // namespace llama_tp
