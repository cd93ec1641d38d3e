#include "server/http/http_task_queue.h"

#include <algorithm>
#include <chrono>

namespace llama_tp::server {

namespace {

constexpr auto kIdleEnd = std::chrono::seconds(3);

}  // namespace

HttpTaskQueue::HttpTaskQueue(size_t n_threads, size_t max_threads) : max_threads_(std::max(n_threads, max_threads)) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < n_threads; ++i) start_thread(true);
}

HttpTaskQueue::~HttpTaskQueue() {
    shutdown();
}

bool HttpTaskQueue::enqueue(std::function<void()> fn) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) return false;
        jobs_.push_back(std::move(fn));
        join_finished();
        if (jobs_.size() > idle_ && threads_.size() < max_threads_) start_thread(false);
    }
    wake_.notify_one();
    return true;
}

void HttpTaskQueue::shutdown() {
    std::list<std::thread> threads;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        threads.swap(threads_);  // no thread is started or joined elsewhere from now on
        finished_.clear();
    }
    wake_.notify_all();
    for (std::thread & t : threads) t.join();
}

size_t HttpTaskQueue::waiting() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return jobs_.size();
}

void HttpTaskQueue::start_thread(bool kept) {
    threads_.emplace_back([this, kept] { work(kept); });
}

void HttpTaskQueue::join_finished() {
    for (const std::thread::id id : finished_) {
        const auto it =
            std::find_if(threads_.begin(), threads_.end(), [id](const std::thread & t) { return t.get_id() == id; });
        if (it == threads_.end()) continue;
        it->join();
        threads_.erase(it);
    }
    finished_.clear();
}

void HttpTaskQueue::work(bool kept) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        ++idle_;
        const auto ready = [this] { return stopping_ || !jobs_.empty(); };
        const bool woke = kept ? (wake_.wait(lock, ready), true) : wake_.wait_for(lock, kIdleEnd, ready);
        --idle_;
        if (jobs_.empty() && (stopping_ || !woke)) break;
        std::function<void()> job = std::move(jobs_.front());
        jobs_.pop_front();
        lock.unlock();
        job();
        lock.lock();
    }
    // A thread that ends on its own is joined by the next enqueue; at
    // shutdown the list is joined whole.
    if (!stopping_) finished_.push_back(std::this_thread::get_id());
}

}  // namespace llama_tp::server
