#pragma once
// AllReduce engines behind one interface. An engine serves one group of
// ranks; every rank calls allreduce() with the same element count and its
// own buffer, and on return every buffer holds the element-wise sum.

#include "ggml-ext/comm/cuda/allreduce_sizes.h"

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llama_tp {

class Environment;
class ProcessGroup;

enum class WireType { F32, BF16 };

// Where the ranks' values live: host memory, or one CUDA device per rank.
enum class RankMemory { Host, Cuda };

struct AllReduceConfig {
    std::string engine = "auto";  // see make_allreduce_engine
    int n_ranks = 1;
    // The float sums' wire; unset: each engine's default (F32 in host
    // memory; the GPU engines take BF16 from a size on, gpu_sizes).
    std::optional<WireType> wire;
    double timeout_s = 30.0;  // a rank waiting longer than this fails the whole group
    RankMemory memory = RankMemory::Host;
    std::vector<int> cuda_devices;  // with RankMemory::Cuda: each rank's device ordinal
    GpuAllReduceSizes gpu_sizes;    // the defaults; GpuAllReduceSizes::from() for the environment's
    // The processes of an MPI launch whose ranks the engine joins (n_ranks
    // in each; nullptr: the ranks of this process only).
    ProcessGroup * processes = nullptr;
};

class AllReduceEngine {
  public:
    virtual ~AllReduceEngine() = default;
    virtual const char * name() const = 0;
    virtual int n_ranks() const = 0;
    // How it joins its ranks, in words, for the line that reports the choice
    // ("2 ranks in one process, host memory").
    virtual std::string joins() const = 0;
    // Whether allreduce() takes the ranks' device memory (RankMemory::Cuda)
    // as it is; an engine of host memory is handed a host copy instead.
    virtual bool takes_device_memory() const { return false; }
    // Whether float sums (some or all) are rounded to BF16 on the wire.
    virtual bool rounds_to_bf16() const = 0;

    // Sums n floats across all ranks in place. Called concurrently, once per
    // rank, from each rank's own thread. Never throws (it may run inside a
    // ggml compute thread): on a timeout or when the group has failed it
    // returns at once and failed() becomes true for every rank.
    virtual void allreduce(int rank, float * data, size_t n) = 0;

    // The same for doubles, always exact on the wire (whatever the config's
    // wire type): sums of float partials held in double do not depend on the
    // order they are added in (see ggml-ext/ops/exact_sum.h). Every rank of one
    // call uses the same element type.
    virtual void allreduce(int rank, double * data, size_t n) = 0;

    // Whether the sums can be queued on each rank's GPU stream
    // (allreduce_on_stream): ordered after the work queued there before them
    // and before the work queued after them, with no wait on the host.
    virtual bool runs_on_stream() const { return false; }
    // Queues the sum on stream (a cudaStream_t of the rank's device) and
    // returns at once. A failure shows in failed() once the stream's work has
    // run. Only where runs_on_stream(); elsewhere it fails the group.
    virtual void allreduce_on_stream(int rank, float * data, size_t n, void * stream);
    virtual void allreduce_on_stream(int rank, double * data, size_t n, void * stream);
    // Whether sums queued on a stream may be captured into a CUDA graph and
    // replayed: their work keeps no state of one call on the host.
    virtual bool sums_replay_in_graphs() const { return false; }

    virtual bool failed() const = 0;
    virtual std::string error() const = 0;
    // Marks the group failed (for example when a rank hit an error outside
    // the collective) so that no rank waits for it.
    virtual void abort(const std::string & why) = 0;
};

// Builds the engine the config names; "auto" walks the chain of engines that
// fit and logs one line saying what it chose and why. Ranks in several
// processes (config.processes) take their group's engine, mpi, or nccl
// across the processes where the ranks are on CUDA devices (auto or nccl);
// any other name is refused there. An engine that fails to
// initialise falls back down the chain with one warning line. Throws
// llama_tp::Error for an unknown engine name.
//
// Names: auto (one rank: none; ranks in one process: cpu, and on CUDA
// devices nccl, then internal, then cpu through host memory), cpu (shared
// host memory, lowest latency), butterfly (pairwise exchange, any rank count,
// slow but always correct), none (one rank only: nothing to reduce), nccl
// (CUDA devices, NCCL), internal (exactly 2 CUDA devices, through pinned host
// memory; upstream's GGML_CUDA_ALLREDUCE names both). Where the build lacks
// one (nccl and internal without CUDA, rccl without HIP, mpi without MPI,
// whose ranks in several processes the rank group joins itself) it falls
// back down the chain with one warning line.
//
// Wire precision: with WireType::BF16 each rank's contribution is rounded to
// bf16 (round to nearest even, relative error <= 2^-8) before it is summed;
// sums accumulate in f32 and the result stays f32. With WireType::F32 no
// engine rounds; unset, the GPU engines round calls from a size on.
std::unique_ptr<AllReduceEngine> make_allreduce_engine(const AllReduceConfig & config);

// The same choice over a given set of engine constructors (this build's, or a
// test's), without logging: the engine and the line make_allreduce_engine logs.
// A constructor throws llama_tp::Error saying why it cannot serve the group.
using AllReduceBuilder = std::function<std::unique_ptr<AllReduceEngine>(const AllReduceConfig &)>;
using AllReduceBuilders = std::map<std::string, AllReduceBuilder>;
struct AllReduceChoice {
    std::unique_ptr<AllReduceEngine> engine;
    std::string log_line;
};
AllReduceChoice choose_allreduce_engine(const AllReduceConfig & config, const AllReduceBuilders & builders);
// This build's constructors, by engine name.
const AllReduceBuilders & built_allreduce_engines();

// The engine name from the environment: LLAMA_TP_ALLREDUCE, else upstream's
// GGML_CUDA_ALLREDUCE (whose "none" is its generic fallback, butterfly here),
// else "". An explicit --allreduce flag beats the environment: callers use
// this only when no flag was given.
std::string allreduce_engine_from(const Environment & env);

// "1 rank", "3 ranks": for AllReduceEngine::joins.
std::string ranks_text(int n_ranks);

// An engine name as the chain reads it: lower case, without white space.
std::string normalized_engine_name(const std::string & name);

}  // namespace llama_tp
