#pragma once
// One persistent thread per follower rank. run(fn) calls fn(rank) for every
// rank at once (rank 0 on the calling thread) and returns when all are done,
// rethrowing the first exception any rank raised.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace llama_tp {

class RankThreads {
  public:
    explicit RankThreads(int n_ranks);
    ~RankThreads();
    RankThreads(const RankThreads &) = delete;
    RankThreads & operator=(const RankThreads &) = delete;

    // on_error(rank, what) is called as soon as a rank fails, so that the
    // others can be released from any collective they wait in.
    void run(const std::function<void(int)> & fn, const std::function<void(int, const char *)> & on_error);

  private:
    void follower(int rank);
    void run_one(int rank);

    std::mutex m_;
    std::condition_variable start_cv_, done_cv_;
    const std::function<void(int)> * job_ = nullptr;
    const std::function<void(int, const char *)> * on_error_ = nullptr;
    uint64_t generation_ = 0;
    int pending_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
    std::vector<std::thread> threads_;
};

}  // namespace llama_tp
