#pragma once
// The HTTP server's connection queue: httplib's thread pool, counting the
// accepted connections that still wait for a thread. A kept-alive connection
// holds its thread between requests, so while others wait the server answers
// with "Connection: close" and lets the thread go to the next connection.

#include <cpp-httplib/httplib.h>

#include <atomic>
#include <cstddef>
#include <functional>

namespace llama_tp::server {

class HttpTaskQueue final : public httplib::TaskQueue {
  public:
    // n_threads at first, growing to max_threads under load.
    HttpTaskQueue(size_t n_threads, size_t max_threads) : pool_(n_threads, max_threads) {}

    bool enqueue(std::function<void()> fn) override {
        waiting_++;
        const bool queued = pool_.enqueue([this, fn = std::move(fn)] {
            waiting_--;
            fn();
        });
        if (!queued) waiting_--;
        return queued;
    }
    void shutdown() override { pool_.shutdown(); }

    // Connections accepted but not yet being served.
    size_t waiting() const { return waiting_.load(); }

  private:
    httplib::ThreadPool pool_;
    std::atomic<size_t> waiting_{0};
};

}  // namespace llama_tp::server
