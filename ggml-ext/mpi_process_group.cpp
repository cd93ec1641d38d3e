// The process group over MPI (built with LLAMA_TP_MPI).
#include "ggml-ext/allreduce_mpi.h"
#include "ggml-ext/error.h"
#include "ggml-ext/mpi_wait.h"
#include "ggml-ext/process_group.h"

#include <atomic>
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
    // A request left posted to a peer that stopped answering can make
    // MPI_Finalize wait for it: then the process leaves MPI unfinalised
    // (mpirun reports it, and the job is failing anyway).
    ~MpiLibrary() {
        if (!abandoned->load()) MPI_Finalize();
    }
    std::shared_ptr<std::atomic<bool>> abandoned = std::make_shared<std::atomic<bool>>(false);
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
        MPI_Comm_free(&node);
        hosts_ = exchange_hosts();
        // A warm-up collective on the data communicator: its connections are
        // made now, not inside the first step's graph.
        Backoff backoff(timeout_s_);
        wait(MPI_Ibarrier(data_.get(), &request_), backoff, "warm-up barrier");
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    int local_size() const override { return local_size_; }
    const std::string & host() const override { return host_; }

    void broadcast(std::vector<uint8_t> & bytes) override {
        uint64_t n = bytes.size();
        // Followers may wait for the next step through any idle time.
        Backoff header_wait = rank_ == 0 ? Backoff(timeout_s_) : Backoff::unbounded();
        wait(MPI_Ibcast(&n, 1, MPI_UINT64_T, 0, control_.get(), &request_), header_wait, "step broadcast");
        bytes.resize(n);
        Backoff body_wait(timeout_s_);
        wait(MPI_Ibcast(bytes.data(), (int) n, MPI_BYTE, 0, control_.get(), &request_), body_wait, "step broadcast");
    }

    void gather(const std::vector<uint8_t> & mine, std::vector<std::vector<uint8_t>> * parts) override {
        uint64_t n = mine.size();
        std::vector<uint64_t> sizes(rank_ == 0 ? size_ : 0);
        Backoff backoff(timeout_s_);
        wait(MPI_Igather(&n, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, 0, control_.get(), &request_), backoff,
             "gather");
        std::vector<int> counts(sizes.size()), offsets(sizes.size());
        std::vector<uint8_t> all;
        for (size_t p = 0, at = 0; p < sizes.size(); at += sizes[p], ++p) {
            counts[p] = (int) sizes[p];
            offsets[p] = (int) at;
            if (p + 1 == sizes.size()) all.resize(at + sizes[p]);
        }
        wait(MPI_Igatherv(mine.data(), (int) n, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE, 0,
                          control_.get(), &request_),
             backoff, "gather");
        if (!parts) return;
        parts->assign(size_, {});
        for (int p = 0; p < size_; ++p)
            (*parts)[p].assign(all.begin() + offsets[p], all.begin() + offsets[p] + counts[p]);
    }

    std::unique_ptr<AllReduceEngine> make_allreduce(const AllReduceConfig & config) override {
        MpiPeers peers;
        peers.process = rank_;
        peers.hosts = hosts_;
        peers.ranks_per_process = config.n_ranks;
        peers.abandoned = library_.abandoned;
        AllReduceConfig c = config;
        c.timeout_s = timeout_s_;
        return std::make_unique<MpiAllReduce>(data_.get(), peers, c);
    }

  private:
    void wait(int rc, Backoff & backoff, const char * what) {
        if (rc == MPI_SUCCESS) rc = mpi_wait(request_, backoff);
        if (rc != MPI_SUCCESS) library_.abandoned->store(true);
        if (rc == MPI_ERR_PENDING) {
            std::string others;
            for (int p = 0; p < size_; ++p) {
                if (p != rank_) others += (others.empty() ? "" : ", ") + std::to_string(p) + " on " + hosts_[p];
            }
            throw Error(std::string(what) + ": no answer within " + std::to_string((int) timeout_s_) +
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
    int rank_ = 0, size_ = 1, local_size_ = 1;
    std::string host_;
    std::vector<std::string> hosts_;
};

}  // namespace

std::unique_ptr<ProcessGroup> join_launched_processes(double timeout_s) {
    if (!launched_by_mpi()) return nullptr;
    return std::make_unique<MpiProcessGroup>(timeout_s);
}

}  // namespace llama_tp
