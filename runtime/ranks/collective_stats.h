#pragma once

#include <cstdint>

namespace llama_tp {

// How often and how long a rank has waited in collectives since loading.
struct CollectiveStats {
    int64_t calls = 0;
    double seconds = 0.0;
};

}  // namespace llama_tp
