#include "runtime/ranks/rank_threads.h"

namespace llama_tp {

RankThreads::RankThreads(int n_ranks) {
    for (int r = 1; r < n_ranks; ++r) threads_.emplace_back([this, r] { follower(r); });
}

RankThreads::~RankThreads() {
    {
        std::lock_guard<std::mutex> lock(m_);
        stop_ = true;
    }
    start_cv_.notify_all();
    for (auto & t : threads_) t.join();
}

void RankThreads::run_one(int rank) {
    try {
        (*job_)(rank);
    } catch (const std::exception & e) {
        (*on_error_)(rank, e.what());
        std::lock_guard<std::mutex> lock(m_);
        if (!error_) error_ = std::current_exception();
    } catch (...) {
        (*on_error_)(rank, "unknown error");
        std::lock_guard<std::mutex> lock(m_);
        if (!error_) error_ = std::current_exception();
    }
}

void RankThreads::follower(int rank) {
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(m_);
            start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
        }
        run_one(rank);
        std::lock_guard<std::mutex> lock(m_);
        if (--pending_ == 0) done_cv_.notify_one();
    }
}

void RankThreads::run(const std::function<void(int)> & fn, const std::function<void(int, const char *)> & on_error) {
    {
        std::lock_guard<std::mutex> lock(m_);
        job_ = &fn;
        on_error_ = &on_error;
        error_ = nullptr;
        pending_ = (int) threads_.size();
        generation_++;
    }
    start_cv_.notify_all();
    run_one(0);
    std::unique_lock<std::mutex> lock(m_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    if (error_) std::rethrow_exception(error_);
}

}  // namespace llama_tp
