#pragma once
// The processes of a rank group launched together by mpirun, one or several
// machines: who this process is, the control messages rank 0 sends its
// followers (broadcast of a step, gather of logit slices) and the AllReduce
// engine that joins the ranks of every process. Data and control travel on
// communicators of their own, so a collective inside a graph never meets a
// control message.

#include "ggml-ext/allreduce_engine.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llama_tp {

class ProcessGroup {
  public:
    virtual ~ProcessGroup() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual int local_size() const = 0;  // processes of the group on this host
    virtual const std::string & host() const = 0;

    // Process 0's bytes to every other process (resized to fit). A follower
    // waits as long as it takes (the group may idle between requests),
    // sleeping so that it does not hold a core. Throws llama_tp::Error.
    virtual void broadcast(std::vector<uint8_t> & bytes) = 0;

    // Every process's bytes to process 0: parts (process 0 only; nullptr
    // elsewhere) receives them in process order. Throws llama_tp::Error,
    // also when a process does not arrive within the timeout.
    virtual void gather(const std::vector<uint8_t> & mine, std::vector<std::vector<uint8_t>> * parts) = 0;

    // The engine for this process's ranks: config.n_ranks of them, global
    // ranks [rank() * n, rank() * n + n), summed with every other process's.
    // Local ranks meet in shared memory, processes through MPI.
    virtual std::unique_ptr<AllReduceEngine> make_allreduce(const AllReduceConfig & config) = 0;
};

// How long a process waits for another inside a step before the group
// fails: short enough that a dead or stopped rank stops every process well
// within 10 s, long enough for any rank's share of one layer.
constexpr double kProcessTimeout_s = 5.0;

// Whether mpirun (or another MPI launcher) started this process.
bool launched_by_mpi();

// Joins the processes this one was launched with: nullptr when it was not
// launched by MPI. Throws llama_tp::Error in a build without MPI, or when the
// MPI library cannot give the thread level the group needs. timeout_s bounds
// every wait for another process inside a step. One per process.
std::unique_ptr<ProcessGroup> join_launched_processes(double timeout_s);

}  // namespace llama_tp
