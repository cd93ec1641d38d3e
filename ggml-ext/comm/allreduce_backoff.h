#pragma once
// Waiting for other ranks without starving them: spin briefly with the CPU's
// pause hint (lowest latency when every rank has its own core), then yield,
// then sleep with growing intervals, so that when ranks outnumber cores the
// rank being waited for gets the core.

#include <chrono>

namespace llama_tp {

class Backoff {
  public:
    // A wait that gives up after timeout_s seconds.
    explicit Backoff(double timeout_s);
    // A wait that never gives up (for waits that are known to end).
    static Backoff unbounded();

    // Waits a little, longer the longer this wait has lasted. Returns false
    // once the timeout has passed.
    bool pause();

  private:
    using Clock = std::chrono::steady_clock;
    Backoff(Clock::time_point start, bool bounded, Clock::duration timeout);
    bool expired(Clock::time_point now) const { return bounded_ && now - start_ >= timeout_; }

    Clock::time_point start_;
    bool bounded_;
    Clock::duration timeout_;
    bool spinning_ = true;
    unsigned spins_ = 0;
    std::chrono::microseconds sleep_;
};

}  // namespace llama_tp
