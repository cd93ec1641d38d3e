#pragma once
// Seeded tensor contents, generated and converted to the storage type in
// slabs so that even a multi-gigabyte model needs little memory.

#include "tools/make-model/spec/model_spec.h"

#include <cstddef>
#include <cstdint>
#include <functional>

namespace llama_tp::make_model {

class TensorDataGenerator {
  public:
    using Sink = std::function<void(const void * data, size_t size)>;

    TensorDataGenerator(uint64_t seed, int n_threads);

    // Passes the tensor's encoded bytes to `sink`, in order, in one or more pieces.
    // Values are mean + stddev * N(0, 1), drawn from streams keyed by the seed,
    // the tensor name and the row, so they do not depend on the thread count
    // or the storage type.
    void generate(const TensorPlan & plan, const Sink & sink) const;

  private:
    uint64_t seed_;
    int n_threads_;
};

}  // namespace llama_tp::make_model
