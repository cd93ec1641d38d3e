#pragma once
// The internal engine: exactly two CUDA devices of one process (compute
// capability 7.0 or later), without a
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
// Sums of at least GpuAllReduceSizes::internal_copy_min_bytes wire bytes go
// through the GPUs' copy engines instead (CopyExchange), in chunks, with an
// add kernel per chunk, on the engine's stream or the caller's. Float sums
// take a BF16 wire by default (from internal_bf16_min_bytes on): PCIe
// through host memory is the slowest link there is.
//
// On a stream (allreduce_on_stream) the small exchange runs inside one kernel
// per call on the rank's stream, with a token per block in mapped host
// memory instead of the host's counters (allreduce_cuda_kernels.h), so the
// host never waits. Its slots and tokens are its own, allocated at the
// first such call.
//
// Counts that differ between the ranks are named as such, except where one
// takes the copy engines and the other not: that shows as a rank that did
// not arrive (the rank group always passes equal counts).
//
// Failure: a rank whose peer does not arrive within the timeout, abort(), or
// a CUDA error fails the group; the other rank stops waiting at once. No
// rank writes into the other's device memory, so giving up is always safe.
// On a stream a timeout shows in failed() once the kernel has ended.

#include "ggml-ext/comm/cuda/allreduce_copy_exchange.h"
#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/comm/allreduce_failure.h"
#include "ggml-ext/gpu/cuda_runtime.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

namespace llama_tp {

class InternalAllReduce final : public AllReduceWithGroupFailure {
  public:
    // Each slot's size: large calls go in several chunks.
    static constexpr size_t kChunkBytes = size_t(8) << 20;

    // Throws llama_tp::Error unless the config has two ranks on CUDA devices.
    explicit InternalAllReduce(const AllReduceConfig & config);
    ~InternalAllReduce() override;

    const char * name() const override { return "internal"; }
    std::string joins() const override { return "2 CUDA devices, through pinned host memory"; }
    int n_ranks() const override { return 2; }
    bool takes_device_memory() const override { return true; }
    bool rounds_to_bf16() const override;
    void allreduce(int rank, float * data, size_t n) override { run(rank, data, n); }
    void allreduce(int rank, double * data, size_t n) override { run(rank, data, n); }
    bool runs_on_stream() const override { return true; }
    // The exchange kernel numbers its chunks on the device; the copy engines'
    // path meets the other rank on the host, so only without it.
    bool sums_replay_in_graphs() const override { return sizes_.internal_copy_min_bytes == 0; }
    void allreduce_on_stream(int rank, float * data, size_t n, void * stream) override { queue(rank, data, n, stream); }
    void allreduce_on_stream(int rank, double * data, size_t n, void * stream) override {
        queue(rank, data, n, stream);
    }
    bool failed() const override;
    std::string error() const override;
    void abort(const std::string & why) override;

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

    // A rank's side of the exchange on a stream.
    struct StreamSide {
        std::unique_ptr<MappedHostBuffer> slots[2], tokens, counts;
        std::unique_ptr<DeviceBuffer> chunks_done;  // ExchangeArgs::chunks_done
    };

    // How one call crosses: its wire, and whether through the copy engines.
    struct CallPath {
        WireType wire = WireType::F32;
        bool copy_engines = false;
        size_t chunk_bytes = 0;  // with copy_engines
    };

    template <typename T>
    CallPath path_of(size_t n) const;
    template <typename T>
    void run(int rank, T * data, size_t n);
    template <typename T>
    void queue(int rank, T * data, size_t n, void * stream);
    template <typename T>
    bool queue_through_copy_engines(int rank, T * data, size_t n, const CallPath & path, cudaStream_t stream);
    void allocate_stream_sides();
    int stream_error() const;
    template <typename T>
    bool exchange_chunk(int rank, T * data, size_t n, size_t len, WireType wire);
    bool await_peer(int rank, uint64_t chunk);

    const std::optional<WireType> wire_;
    const GpuAllReduceSizes sizes_;
    const double timeout_s_;
    RankState ranks_[2];
    StreamSide stream_sides_[2];
    std::once_flag stream_sides_allocated_;
    std::unique_ptr<MappedHostBuffer> stream_error_;  // ExchangeError, written by the kernels
    std::unique_ptr<CopyExchange> copy_;              // at the first call that takes it
    std::once_flag copy_allocated_;
};

}  // namespace llama_tp
