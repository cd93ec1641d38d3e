#pragma once
// Counters and gauges for GET /metrics, in Prometheus' text format. HTTP
// threads count requests; the scheduler thread reports each decode step.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/engine.h"

namespace llama_tp::server {

// Point-in-time values that the scheduler knows.
struct SchedulerGauges {
    int32_t busy_slots = 0;
    int32_t total_slots = 0;
    int32_t queued = 0;
    std::vector<CollectiveStats> collectives;  // per tensor-parallel rank
};

class Metrics {
  public:
    // `endpoint` must come from a fixed set (a route, or "other"), so that the
    // number of series stays bounded.
    void count_request(const std::string & endpoint, int status);

    // One decode step: prompt tokens it decoded, tokens sampled after it,
    // slots busy in it, and how long decoding and sampling took.
    void count_step(int32_t n_prompt, int32_t n_generated, int32_t n_busy, double ms);
    // A finished request: prompt tokens it reused from the cache, and its
    // length (prompt and generated).
    void count_finished(int32_t n_cached, int32_t n_tokens);
    // One slot's drafts checked in a step: tokens proposed, and confirmed.
    void count_drafts(int32_t n_drafted, int32_t n_accepted);

    std::string prometheus(const SchedulerGauges & gauges) const;

  private:
    struct Step {
        std::chrono::steady_clock::time_point at;
        int32_t n_prompt;
        int32_t n_generated;
        double ms;
    };
    void forget_old_steps(std::chrono::steady_clock::time_point now) const;
    void upstream_series(std::ostringstream & out, const SchedulerGauges & gauges, double prompt_rate,
                         double gen_rate) const;

    mutable std::mutex mutex_;
    std::map<std::pair<std::string, int>, uint64_t> requests_;
    uint64_t prompt_tokens_ = 0;
    uint64_t generated_tokens_ = 0;
    uint64_t steps_ = 0;
    double busy_ms_ = 0;
    double prompt_ms_ = 0;     // of steps that decoded prompt tokens
    double generate_ms_ = 0;   // of steps that sampled tokens
    uint64_t busy_slots_ = 0;  // summed over steps
    uint64_t cached_tokens_ = 0;
    uint64_t drafted_tokens_ = 0;
    uint64_t accepted_tokens_ = 0;
    uint64_t drafts_ = 0;
    // [i]: drafts whose token at position i was confirmed (positions up to the longest draft).
    std::vector<uint64_t> accepted_per_position_;
    int32_t longest_ = 0;              // longest request, prompt and generated
    mutable std::deque<Step> recent_;  // the last kWindow of steps, for rates
};

}  // namespace llama_tp::server
