#pragma once
// The HTTP server's connection pool: every accepted connection gets a thread
// at once (an idle one, else a new one up to the pool's most), because a
// connection holds its thread for as long as its client takes to send the
// request; a connection that must wait for a thread would wait behind slow
// clients. Threads beyond the first ones end after 3 idle seconds. A
// kept-alive connection holds its thread between requests, so while others
// wait the server answers with "Connection: close" and lets the thread go to
// the next connection.

#include <cpp-httplib/httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

namespace llama_tp::server {

class HttpTaskQueue final : public httplib::TaskQueue {
  public:
    // n_threads kept, up to max_threads under load.
    HttpTaskQueue(size_t n_threads, size_t max_threads);
    ~HttpTaskQueue() override;
    HttpTaskQueue(const HttpTaskQueue &) = delete;
    HttpTaskQueue & operator=(const HttpTaskQueue &) = delete;

    bool enqueue(std::function<void()> fn) override;
    // Stops taking work, lets the running connections finish, joins every thread.
    void shutdown() override;

    // Connections accepted but not yet being served.
    size_t waiting() const;

  private:
    void work(bool kept);
    void start_thread(bool kept);  // with mutex_ held
    void join_finished();          // with mutex_ held

    const size_t max_threads_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::function<void()>> jobs_;
    std::list<std::thread> threads_;
    std::vector<std::thread::id> finished_;  // ended, to be joined
    size_t idle_ = 0;
    bool stopping_ = false;
};

}  // namespace llama_tp::server
