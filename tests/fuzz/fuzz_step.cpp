// The step message a follower decodes from process 0's bytes: any bytes
// either decode to a whole step, which encodes back to the same bytes, or
// are refused with llama_tp::Error.
#include "runtime/error.h"
#include "runtime/ranks/step.h"

#include <cstdint>
#include <cstdlib>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const std::vector<uint8_t> bytes(data, data + size);
    llama_tp::Step step;
    try {
        step = llama_tp::Step::decode(bytes);
    } catch (const llama_tp::Error &) {
        return 0;
    }
    if (step.encode() != bytes) std::abort();  // a decoded step is exactly what was sent
    return 0;
}
