#pragma once
// The processes of a rank group launched together by mpirun, one or several
// machines: who this process is, the control messages rank 0 sends its
// followers (broadcast of a step, gather of logit slices) and the AllReduce
// engine that joins the ranks of every process. Data and control travel on
// communicators of their own, so a collective inside a graph never meets a
// control message.

#include "ggml-ext/comm/allreduce_engine.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llama_tp {

// How long a wait for another process may last: a step's (the timeout the
// group was joined with), start-up's, when processes open and load the
// model at their own pace, or a follower's for the next step while the group
// idles (process 0 sends a step or a heartbeat at least every
// kHeartbeatInterval_s, so a step's timeout past that means it is gone).
enum class Patience { Step, Startup, Idle };

class ProcessGroup {
  public:
    // A group whose processes did not end together (end_together() was not
    // called, or a wait was abandoned) takes the whole job down, so that no
    // process waits for one that is gone.
    virtual ~ProcessGroup() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual int local_size() const = 0;  // processes of the group on this host
    virtual int local_rank() const = 0;  // this process's index among them
    virtual const std::string & host() const = 0;

    // Process 0's bytes to every other process (resized to fit). A follower
    // waits for them as long as the patience allows (at start-up: as long as
    // it takes), sleeping so that it does not hold a core. Throws
    // llama_tp::Error, at once after a wait was abandoned.
    virtual void broadcast(std::vector<uint8_t> & bytes, Patience patience = Patience::Step) = 0;

    // Every process's bytes to process 0: parts (process 0 only; nullptr
    // elsewhere) receives them in process order. Throws llama_tp::Error,
    // also when a process does not arrive in time.
    virtual void gather(const std::vector<uint8_t> & mine, std::vector<std::vector<uint8_t>> * parts,
                        Patience patience = Patience::Step) = 0;

    // Every process knows the group ends here (a shutdown step sent or
    // received, a start refused on all): MPI is finalised normally.
    virtual void end_together() = 0;

    // The engine for this process's ranks: config.n_ranks of them, global
    // ranks [rank() * n, rank() * n + n), summed with every other process's.
    // Ranks on CUDA devices sum through NCCL across the processes where the
    // build has it, every process can join and the engine is auto or nccl;
    // otherwise local ranks meet in shared memory, processes through MPI.
    virtual std::unique_ptr<AllReduceEngine> make_allreduce(const AllReduceConfig & config) = 0;
};

// How long a process waits for another inside a step before the group
// fails: short enough that a dead or stopped rank stops every process well
// within 10 s, long enough for any rank's share of one layer.
constexpr double kProcessTimeout_s = 5.0;
// Start-up: a large model read from a slow disk on another machine.
constexpr double kStartupTimeout_s = 600.0;
// While the group idles process 0 sends a heartbeat this often; a follower
// that hears nothing for a step's timeout longer gives up on it.
constexpr double kHeartbeatInterval_s = 1.0;

// Whether mpirun (or another MPI launcher) started this process.
bool launched_by_mpi();

// Joins the processes this one was launched with: nullptr when it was not
// launched by MPI. Throws llama_tp::Error in a build without MPI, or when the
// MPI library cannot give the thread level the group needs. timeout_s bounds
// every wait for another process inside a step. One per process.
std::unique_ptr<ProcessGroup> join_launched_processes(double timeout_s);

}  // namespace llama_tp
