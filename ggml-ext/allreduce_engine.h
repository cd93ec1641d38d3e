#pragma once
// AllReduce engines behind one interface. An engine serves one group of
// ranks; every rank calls allreduce() with the same element count and its
// own buffer, and on return every buffer holds the element-wise sum.

#include <cstddef>
#include <memory>
#include <string>

namespace llama_tp {

enum class WireType { F32, BF16 };

struct AllReduceConfig {
    std::string engine = "auto";  // auto | cpu | butterfly | none (later: mpi, nccl, rccl, internal)
    int n_ranks = 1;
    WireType wire = WireType::F32;
    double timeout_s = 30.0;  // a rank waiting longer than this fails the whole group
};

class AllReduceEngine {
  public:
    virtual ~AllReduceEngine() = default;
    virtual const char * name() const = 0;
    virtual int n_ranks() const = 0;

    // Sums n floats across all ranks in place. Called concurrently, once per
    // rank, from each rank's own thread. Never throws (it may run inside a
    // ggml compute thread): on a timeout or when the group has failed it
    // returns at once and failed() becomes true for every rank.
    virtual void allreduce(int rank, float * data, size_t n) = 0;

    // The same for doubles, always exact on the wire (whatever the config's
    // wire type): sums of float partials held in double do not depend on the
    // order they are added in (see ggml-ext/exact_sum.h). Every rank of one
    // call uses the same element type.
    virtual void allreduce(int rank, double * data, size_t n) = 0;

    virtual bool failed() const = 0;
    virtual std::string error() const = 0;
    // Marks the group failed (for example when a rank hit an error outside
    // the collective) so that no rank waits for it.
    virtual void abort(const std::string & why) = 0;
};

// Builds the engine the config names; "auto" walks the chain of engines that
// fit and logs one line saying what it chose and why. An engine that fails to
// initialise falls back down the chain with one warning line. Throws
// llama_tp::Error for an unknown engine name.
//
// Names: auto (one rank: none; ranks in one process: cpu), cpu (shared host
// memory, lowest latency), butterfly (pairwise exchange, any rank count, slow
// but always correct), none (one rank only: nothing to reduce). Upstream's
// GGML_CUDA_ALLREDUCE names nccl and internal are accepted too; they need a
// CUDA build, so elsewhere they fall back down the chain (to cpu) with one
// warning line, as do the planned mpi and rccl in a build without them.
//
// Wire precision: with WireType::BF16 each rank's contribution is rounded to
// bf16 (round to nearest even, relative error <= 2^-8) before it is summed;
// sums accumulate in f32 and the result stays f32.
std::unique_ptr<AllReduceEngine> make_allreduce_engine(const AllReduceConfig & config);

// The engine name from the environment: LLAMA_TP_ALLREDUCE, else upstream's
// GGML_CUDA_ALLREDUCE, else "". An explicit --allreduce flag beats the
// environment: callers use this only when no flag was given.
std::string allreduce_engine_from_env();

// An engine name as the chain reads it: lower case, without white space.
std::string normalized_engine_name(const std::string & name);

// Every name make_allreduce_engine accepts, for usage text and messages.
const char * allreduce_engine_names();

}  // namespace llama_tp
