#pragma once
// The internal engine: exactly two CUDA devices of one process, without a
// peer link, exchange their values through page-locked host memory that both
// reach (mapped). Each call goes chunk by chunk: a rank puts its wire values
// into its slot of host memory (a copy, or a kernel rounding to BF16), waits
// for its stream, says so through a counter in host memory, waits for the
// other rank's counter, and adds the other rank's values to its own, read by
// a kernel straight from host memory. Both add the same two wire values, so
// both get the same bits (as the cpu engine's sum of two ranks).
// Slots alternate by chunk: a rank writes a slot again only after the other
// rank has arrived at the next chunk, which it does after reading that slot,
// so one wait per chunk is enough. Doubles cross exactly. CUDA builds only.
//
// Failure: a rank whose peer does not arrive within the timeout, abort(), or
// a CUDA error fails the group; the other rank stops waiting at once. No
// rank writes into the other's device memory, so giving up is always safe.

#include "ggml-ext/allreduce_engine.h"
#include "ggml-ext/allreduce_failure.h"
#include "ggml-ext/cuda_runtime.h"

#include <atomic>
#include <cstdint>
#include <memory>

namespace llama_tp {

class InternalAllReduce final : public AllReduceWithGroupFailure {
  public:
    // Each slot's size: large calls go in several chunks.
    static constexpr size_t kChunkBytes = size_t(8) << 20;

    // Throws llama_tp::Error unless the config has two ranks on CUDA devices.
    explicit InternalAllReduce(const AllReduceConfig & config);
    ~InternalAllReduce() override;

    const char * name() const override { return "internal"; }
    int n_ranks() const override { return 2; }
    bool takes_device_memory() const override { return true; }
    void allreduce(int rank, float * data, size_t n) override { run(rank, data, n); }
    void allreduce(int rank, double * data, size_t n) override { run(rank, data, n); }

  private:
    // Values shared by chunk parity, like the slots.
    struct ChunkCount {
        size_t n = 0;
        size_t element_size = 0;
    };
    struct alignas(64) RankState {
        int device = 0;
        std::unique_ptr<CudaStream> stream;
        std::unique_ptr<MappedHostBuffer> slots[2];
        ChunkCount counts[2];
        std::atomic<uint64_t> published{0};  // chunks whose values are in their slot
        uint64_t chunks = 0;                 // chunks this rank has started (owner only)
    };

    template <typename T>
    void run(int rank, T * data, size_t n);
    template <typename T>
    bool exchange_chunk(int rank, T * data, size_t n, size_t len);
    bool await_peer(int rank, uint64_t chunk);

    const WireType wire_;
    const double timeout_s_;
    RankState ranks_[2];
};

}  // namespace llama_tp
