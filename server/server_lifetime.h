#pragma once
// How the server's process runs and ends: whether it is ready, the one
// request to stop (a signal, a listener that stopped, a failed rank group)
// that the main thread waits for, and the exit status it leaves. Shared by
// every thread that may end the process.

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace llama_tp::server {

class ServerLifetime {
  public:
    void set_ready() { ready_ = true; }
    bool ready() const { return ready_; }

    void request_stop() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        stopped_.notify_all();
    }
    bool stop_requested() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return stop_;
    }
    void wait_for_stop() {
        std::unique_lock<std::mutex> lock(mutex_);
        stopped_.wait(lock, [this] { return stop_; });
    }

    // What ends the process with status 1: a listener that stopped without a
    // stop being asked, a rank group that failed.
    void http_failed() { http_failed_ = true; }
    void group_failed() { group_failed_ = true; }
    int exit_status() const { return http_failed_ || group_failed_ ? 1 : 0; }

  private:
    mutable std::mutex mutex_;
    std::condition_variable stopped_;
    bool stop_ = false;
    std::atomic<bool> ready_{false};
    std::atomic<bool> http_failed_{false};
    std::atomic<bool> group_failed_{false};
};

}  // namespace llama_tp::server
