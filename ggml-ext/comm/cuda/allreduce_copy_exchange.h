#pragma once
// The internal engine's path for large sums (two CUDA devices of one
// process). Each rank's wire values go to page-locked host memory through its
// GPU's copy engine (device to host) in chunks; the other rank copies them
// into its device memory the same way (host to device), and one add kernel
// per chunk sums them on the rank's stream. The compute engines stay free
// while the bytes move, and chunk c's add overlaps chunk c+1's copies.
//
// Everything is queued: the GPUs order on each other through CUDA events (an
// event of one device may be waited for on another's stream in the same
// process), and a host thread waits only for the other rank's thread to have
// queued its side, never for a GPU. No kernel of this path waits, so every
// queued copy and add ends even when the group fails.
//
// A call goes in pieces of at most kPieceBytes wire bytes; consecutive
// pieces alternate between two sets of buffers and events (by the piece's
// number), and a rank writes a set again only once the other rank's reads of
// it are queued behind events it then waits for. Piece p + 1 goes out before
// piece p comes in, so that large calls keep both directions busy. CUDA
// builds only.

#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/comm/allreduce_failure.h"
#include "ggml-ext/gpu/cuda_runtime.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace llama_tp {

class CopyExchange {
  public:
    static constexpr size_t kPieceBytes = size_t(8) << 20;

    // devices: each rank's CUDA device. failure: the engine's group state.
    CopyExchange(const int devices[2], double timeout_s, GroupFailure & failure);
    ~CopyExchange();

    // Queues rank's side of the sum of n values at data (its device's
    // memory) on stream, after the work queued there before and before the
    // work queued after; floats cross on `wire`, doubles as they are; chunks
    // of chunk_bytes wire bytes. Returns false (with the group failed) when
    // the other rank did not queue its side in time, the counts differ, or a
    // CUDA call failed. Throws nothing.
    template <typename T>
    bool queue(int rank, T * data, size_t n, WireType wire, size_t chunk_bytes, cudaStream_t stream);

    // Waits until rank's copies have ended (after a failure: they may still
    // read the values the caller is about to reuse). Throws nothing.
    void drain(int rank);

  private:
    // One rank's buffers and events for the pieces of one parity.
    struct PieceSet {
        std::unique_ptr<MappedHostBuffer> ring;  // this rank's wire values, read by the other rank's GPU
        std::unique_ptr<DeviceBuffer> wire_out;  // BF16 values to copy out
        std::unique_ptr<DeviceBuffer> wire_in;   // the other rank's values, copied in
        std::vector<std::unique_ptr<CudaEvent>> copied_out, copied_in;  // per chunk
        std::unique_ptr<CudaEvent> ready, out_done, in_done, added;
        size_t n = 0, element_size = 0;  // the call's, compared by the other rank
    };
    struct alignas(64) Side {
        int device = 0;
        std::unique_ptr<CudaStream> copy_out, copy_in;
        PieceSet sets[2];
        std::atomic<uint64_t> queued{0};   // pieces whose copies out are queued
        std::atomic<uint64_t> fetched{0};  // pieces whose reads of the other's ring are queued
        uint64_t pieces = 0;               // pieces started (owner only)
    };

    // One piece of a call: values [begin, begin + len) in n_chunks chunks of chunk_len (the last one shorter).
    struct Piece {
        uint64_t number = 0;
        size_t begin = 0, len = 0, n_chunks = 0, chunk_len = 0;
        size_t wire_size = 0;  // bytes per value on the wire
        size_t count(size_t c) const { return c + 1 < n_chunks ? chunk_len : len - c * chunk_len; }
    };
    Piece piece(int rank, size_t begin, size_t len, size_t wire_size, size_t chunk_bytes);
    // A piece's view of both ranks: this rank's side and set, the other's.
    struct PieceSides {
        Side & me;
        const Side & peer;
        PieceSet & mine;
        const PieceSet & theirs;
    };
    PieceSides sides_of(int rank, const Piece & p);
    // The halves of a piece: its values out to host memory, the other rank's in and added.
    // false when the group failed; they throw on a CUDA error.
    template <typename T>
    bool send(int rank, T * data, size_t n, const Piece & p, WireType wire, cudaStream_t stream);
    template <typename T>
    bool receive(int rank, T * data, size_t n, const Piece & p, WireType wire, cudaStream_t stream);
    bool await(const std::atomic<uint64_t> & counter, uint64_t want, int waited_rank);
    static void wait(cudaStream_t stream, const CudaEvent & event, int device);
    static void record(const CudaEvent & event, cudaStream_t stream, int device);

    const double timeout_s_;
    GroupFailure & failure_;
    size_t max_chunks_;
    Side sides_[2];
};

}  // namespace llama_tp
