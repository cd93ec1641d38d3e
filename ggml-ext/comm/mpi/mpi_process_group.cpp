// The process group over MPI (built with LLAMA_TP_MPI).
#include "ggml-ext/comm/mpi/allreduce_mpi.h"
#ifdef LLAMA_TP_HAVE_NCCL
#include "ggml-ext/comm/cuda/allreduce_nccl_processes.h"
#endif
#include "ggml-ext/error.h"
#include "ggml-ext/comm/mpi/mpi_wait.h"
#include "ggml-ext/comm/process_group.h"

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>

#include <mpi.h>

namespace llama_tp {
namespace {

// One communicator of the group's processes, used for one kind of message only.
class Communicator {
  public:
    explicit Communicator(MPI_Comm parent) {
        check(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
        check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    }
    ~Communicator() {
        if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    }
    Communicator(const Communicator &) = delete;
    Communicator & operator=(const Communicator &) = delete;
    MPI_Comm get() const { return comm_; }

    static void check(int rc, const char * what) {
        if (rc != MPI_SUCCESS) throw Error(std::string(what) + " failed: " + mpi_error_text(rc));
    }

  private:
    MPI_Comm comm_ = MPI_COMM_NULL;
};

// MPI itself: initialised by the first group of a process, finalised with it.
class MpiLibrary {
  public:
    MpiLibrary() {
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (initialized) throw Error("MPI is already initialised in this process: one process group per process");
        // Ranks of one process call MPI from different threads, never at the same time.
        int provided = MPI_THREAD_SINGLE;
        Communicator::check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
        if (provided < MPI_THREAD_SERIALIZED) {
            MPI_Finalize();
            throw Error("the MPI library gives thread level " + std::to_string(provided) +
                        ", llama-tp needs MPI_THREAD_SERIALIZED (calls from several threads, one at a time)");
        }
    }
    ~MpiLibrary() { MPI_Finalize(); }
    MpiLibrary(const MpiLibrary &) = delete;
    MpiLibrary & operator=(const MpiLibrary &) = delete;
};

std::string processor_name() {
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    int n = 0;
    MPI_Get_processor_name(name, &n);
    return std::string(name, n);
}

class MpiProcessGroup final : public ProcessGroup {
  public:
    explicit MpiProcessGroup(double timeout_s)
        : timeout_s_(timeout_s), control_(MPI_COMM_WORLD), data_(MPI_COMM_WORLD) {
        MPI_Comm_rank(control_.get(), &rank_);
        MPI_Comm_size(control_.get(), &size_);
        host_ = processor_name();
        MPI_Comm node = MPI_COMM_NULL;
        Communicator::check(MPI_Comm_split_type(control_.get(), MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
                            "MPI_Comm_split_type");
        MPI_Comm_size(node, &local_size_);
        MPI_Comm_rank(node, &local_rank_);
        MPI_Comm_free(&node);
        hosts_ = exchange_hosts();
        // A warm-up collective on the data communicator: its connections are
        // made now, not inside the first step's graph.
        Backoff backoff(timeout_s_);
        wait(MPI_Ibarrier(data_.get(), &request_), backoff, timeout_s_, "warm-up barrier");
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    int local_size() const override { return local_size_; }
    int local_rank() const override { return local_rank_; }
    const std::string & host() const override { return host_; }

    void broadcast(std::vector<uint8_t> & bytes, Patience patience) override {
        refuse_if_abandoned("step broadcast");
        uint64_t n = bytes.size();
        // At start-up followers wait for process 0 however long it loads.
        const bool as_long_as_it_takes = rank_ != 0 && patience == Patience::Startup;
        Backoff header_wait = as_long_as_it_takes ? Backoff::unbounded() : Backoff(seconds(patience));
        wait(MPI_Ibcast(&n, 1, MPI_UINT64_T, 0, control_.get(), &request_), header_wait, seconds(patience),
             "step broadcast");
        bytes.resize(n);
        Backoff body_wait(seconds(patience));
        wait(MPI_Ibcast(bytes.data(), (int) n, MPI_BYTE, 0, control_.get(), &request_), body_wait, seconds(patience),
             "step broadcast");
    }

    void gather(const std::vector<uint8_t> & mine, std::vector<std::vector<uint8_t>> * parts,
                Patience patience) override {
        refuse_if_abandoned("gather");
        uint64_t n = mine.size();
        std::vector<uint64_t> sizes(rank_ == 0 ? size_ : 0);
        Backoff backoff(seconds(patience));
        wait(MPI_Igather(&n, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, 0, control_.get(), &request_), backoff,
             seconds(patience), "gather");
        std::vector<int> counts(sizes.size()), offsets(sizes.size());
        uint64_t total = 0;
        for (size_t p = 0; p < sizes.size(); ++p) {
            counts[p] = (int) sizes[p];
            offsets[p] = (int) total;
            total += sizes[p];
        }
        if (total > (uint64_t) INT_MAX) {
            abandoned_->store(true);  // the others wait in the Igatherv this process does not post
            throw Error("gather: " + std::to_string(total) + " bytes are more than one MPI call takes");
        }
        std::vector<uint8_t> all(total);
        wait(MPI_Igatherv(mine.data(), (int) n, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE, 0,
                          control_.get(), &request_),
             backoff, seconds(patience), "gather");
        if (!parts) return;
        parts->assign(size_, {});
        for (int p = 0; p < size_; ++p) {
            (*parts)[p].assign(all.begin() + offsets[p], all.begin() + offsets[p] + counts[p]);
        }
    }

    void end_together() override { ended_together_ = true; }

    ~MpiProcessGroup() override {
        if (ended_together_ && !abandoned_->load()) return;
        // A process left without the others, or one stopped answering: MPI
        // cannot finalise with them, so the job ends here, every process.
        std::fflush(stdout);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    std::unique_ptr<AllReduceEngine> make_allreduce(const AllReduceConfig & config) override {
        AllReduceConfig c = config;
        c.timeout_s = timeout_s_;
        if (std::unique_ptr<AllReduceEngine> nccl = nccl_across(c)) return nccl;
        MpiPeers peers;
        peers.process = rank_;
        peers.hosts = hosts_;
        peers.abandoned = abandoned_;
        return std::make_unique<MpiAllReduce>(data_.get(), peers, c);
    }

  private:
    // NCCL across the processes where the ranks are on CUDA devices and the
    // engine is auto or nccl; nullptr, with one warning line from process 0
    // where nccl was possible or asked for, when it cannot.
    std::unique_ptr<AllReduceEngine> nccl_across(const AllReduceConfig & c) {
        const std::string name = normalized_engine_name(c.engine);
        const bool asked = name == "nccl";
        if (!asked && !((name == "auto" || name.empty()) && c.memory == RankMemory::Cuda)) return nullptr;
        std::string why;
        if (c.memory != RankMemory::Cuda) {
            why = "the ranks' values are in host memory";
        } else {
#ifdef LLAMA_TP_HAVE_NCCL
            if (std::unique_ptr<AllReduceEngine> engine = join_nccl_across(*this, c, why)) return engine;
#else
            if (!asked) return nullptr;
            why = "needs a build with LLAMA_TP_NCCL=ON";
#endif
        }
        if (rank_ == 0)
            std::fprintf(stderr, "llama-tp: warning: allreduce engine nccl unavailable (%s); using mpi\n", why.c_str());
        return nullptr;
    }

    void refuse_if_abandoned(const char * what) const {
        if (abandoned_->load()) throw Error(std::string(what) + ": the process group has failed");
    }

    double seconds(Patience patience) const {
        switch (patience) {
            case Patience::Startup:
                return kStartupTimeout_s;
            case Patience::Idle:
                return timeout_s_ + kHeartbeatInterval_s;
            case Patience::Step:
                break;
        }
        return timeout_s_;
    }

    // Completes an operation just posted (rc: its outcome). Once a wait was
    // abandoned no more MPI calls are made: their buffers may still be in use.
    void wait(int rc, Backoff & backoff, double timeout_s, const char * what) {
        if (rc == MPI_SUCCESS) rc = mpi_wait(request_, backoff);
        if (rc != MPI_SUCCESS) abandoned_->store(true);
        if (rc == MPI_ERR_PENDING) {
            std::string others;
            for (int p = 0; p < size_; ++p) {
                if (p != rank_) others += (others.empty() ? "" : ", ") + std::to_string(p) + " on " + hosts_[p];
            }
            throw Error(std::string(what) + ": no answer within " + std::to_string((int) timeout_s) +
                        " s: " + (size_ == 2 ? "process " : "one of processes ") + others +
                        " stopped answering (waiting: process " + std::to_string(rank_) + " on " + host_ + ")");
        }
        if (rc != MPI_SUCCESS) throw Error(std::string(what) + " failed: " + mpi_error_text(rc));
    }

    std::vector<std::string> exchange_hosts() {
        char mine[MPI_MAX_PROCESSOR_NAME] = {0};
        std::strncpy(mine, host_.c_str(), sizeof mine - 1);
        std::vector<char> all((size_t) size_ * MPI_MAX_PROCESSOR_NAME);
        Communicator::check(MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                                          MPI_CHAR, control_.get()),
                            "MPI_Allgather");
        std::vector<std::string> hosts;
        for (int p = 0; p < size_; ++p) hosts.emplace_back(all.data() + (size_t) p * MPI_MAX_PROCESSOR_NAME);
        return hosts;
    }

    double timeout_s_;
    MpiLibrary library_;
    Communicator control_, data_;
    MPI_Request request_ = MPI_REQUEST_NULL;
    int rank_ = 0, size_ = 1, local_size_ = 1, local_rank_ = 0;
    bool ended_together_ = false;
    // Set when a request is left posted (a peer stopped answering).
    std::shared_ptr<std::atomic<bool>> abandoned_ = std::make_shared<std::atomic<bool>>(false);
    std::string host_;
    std::vector<std::string> hosts_;
};

}  // namespace

std::unique_ptr<ProcessGroup> join_launched_processes(double timeout_s) {
    if (!launched_by_mpi()) return nullptr;
    return std::make_unique<MpiProcessGroup>(timeout_s);
}

}  // namespace llama_tp
