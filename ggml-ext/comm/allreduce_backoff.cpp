#include "ggml-ext/comm/allreduce_backoff.h"

#include <algorithm>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace llama_tp {
namespace {

// A peer on its own core that is in step arrives within a few microseconds.
// Longer spinning costs a peer waiting for this core that much per wait.
constexpr auto kSpinPhase = std::chrono::microseconds(1);
// Clock reads are cheap but not free: while spinning, look every so often.
constexpr unsigned kSpinsPerClockRead = 8;
// Yielding keeps latency low while ready threads still get the core.
constexpr auto kYieldPhase = std::chrono::milliseconds(2);
constexpr auto kFirstSleep = std::chrono::microseconds(20);
constexpr auto kLongestSleep = std::chrono::microseconds(500);
// Decades, in seconds: a longer timeout would overflow the clock's range.
constexpr double kLongestTimeout_s = 1e9;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

std::chrono::steady_clock::duration to_duration(double seconds) {
    const double clamped = seconds > 0 ? std::min(seconds, kLongestTimeout_s) : 0.0;  // NaN counts as 0
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(clamped));
}

}  // namespace

Backoff::Backoff(double timeout_s) : Backoff(Clock::now(), true, to_duration(timeout_s)) {}

Backoff::Backoff(Clock::time_point start, bool bounded, Clock::duration timeout)
    : start_(start), bounded_(bounded), timeout_(timeout), sleep_(kFirstSleep) {}

Backoff Backoff::unbounded() {
    return Backoff(Clock::now(), false, Clock::duration::zero());
}

bool Backoff::pause() {
    if (spinning_) {
        cpu_relax();
        if (++spins_ % kSpinsPerClockRead != 0) return true;
    }
    const Clock::time_point now = Clock::now();
    if (expired(now)) return false;
    spinning_ = now - start_ < kSpinPhase;
    if (spinning_) return true;
    if (now - start_ < kYieldPhase) {
        std::this_thread::yield();
        return true;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, kLongestSleep);
    return true;
}

}  // namespace llama_tp
