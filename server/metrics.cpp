#include "server/metrics.h"

#include <sstream>

namespace llama_tp::server {

namespace {

// Rates are averaged over the steps of this long, so that they follow load
// changes within seconds but do not jump with every step.
constexpr std::chrono::seconds kWindow{10};

constexpr const char * kPrefix = "llamatp_";

void header(std::ostringstream & out, const char * name, const char * type, const char * help) {
    out << "# HELP " << kPrefix << name << ' ' << help << '\n';
    out << "# TYPE " << kPrefix << name << ' ' << type << '\n';
}

template <typename T>
void sample(std::ostringstream & out, const char * name, T value) {
    out << kPrefix << name << ' ' << value << '\n';
}

}  // namespace

void Metrics::count_request(const std::string & endpoint, int status) {
    std::lock_guard<std::mutex> lock(mutex_);
    requests_[{endpoint, status}]++;
}

void Metrics::count_step(int32_t n_prompt, int32_t n_generated, double ms) {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    prompt_tokens_ += (uint64_t) n_prompt;
    generated_tokens_ += (uint64_t) n_generated;
    steps_++;
    busy_ms_ += ms;
    recent_.push_back({now, n_prompt, n_generated, ms});
    forget_old_steps(now);
}

void Metrics::forget_old_steps(std::chrono::steady_clock::time_point now) const {
    while (!recent_.empty() && now - recent_.front().at > kWindow) {
        recent_.pop_front();
    }
}

std::string Metrics::prometheus(const SchedulerGauges & gauges) const {
    std::lock_guard<std::mutex> lock(mutex_);
    forget_old_steps(std::chrono::steady_clock::now());
    // Speed while working: tokens over the time of the steps that carried
    // them (a step holding both kinds counts for both).
    double prompt_ms = 0, gen_ms = 0;
    uint64_t prompt_n = 0, gen_n = 0;
    for (const auto & s : recent_) {
        if (s.n_prompt > 0) {
            prompt_ms += s.ms;
            prompt_n += (uint64_t) s.n_prompt;
        }
        if (s.n_generated > 0) {
            gen_ms += s.ms;
            gen_n += (uint64_t) s.n_generated;
        }
    }

    std::ostringstream out;
    header(out, "requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
    for (const auto & [key, n] : requests_) {
        out << kPrefix << "requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} " << n
            << '\n';
    }
    header(out, "prompt_tokens_total", "counter", "Prompt tokens decoded (cached prefixes not included).");
    sample(out, "prompt_tokens_total", prompt_tokens_);
    header(out, "tokens_predicted_total", "counter", "Tokens generated.");
    sample(out, "tokens_predicted_total", generated_tokens_);
    header(out, "decode_steps_total", "counter", "Batched decode steps.");
    sample(out, "decode_steps_total", steps_);
    header(out, "decode_seconds_total", "counter", "Time spent in decode steps, in seconds.");
    sample(out, "decode_seconds_total", busy_ms_ / 1e3);
    header(out, "prompt_tokens_per_second", "gauge", "Prefill speed over the steps of the last 10 s.");
    sample(out, "prompt_tokens_per_second", prompt_ms > 0 ? 1e3 * (double) prompt_n / prompt_ms : 0.0);
    header(out, "predicted_tokens_per_second", "gauge", "Generation speed over the steps of the last 10 s.");
    sample(out, "predicted_tokens_per_second", gen_ms > 0 ? 1e3 * (double) gen_n / gen_ms : 0.0);
    header(out, "requests_queued", "gauge", "Requests waiting for a free slot.");
    sample(out, "requests_queued", gauges.queued);
    header(out, "slots_busy", "gauge", "Slots running a request.");
    sample(out, "slots_busy", gauges.busy_slots);
    header(out, "slots_total", "gauge", "Slots (-np).");
    sample(out, "slots_total", gauges.total_slots);
    header(out, "collective_calls_total", "counter", "AllReduce calls, per tensor-parallel rank.");
    for (size_t r = 0; r < gauges.collectives.size(); ++r) {
        out << kPrefix << "collective_calls_total{rank=\"" << r << "\"} " << gauges.collectives[r].calls << '\n';
    }
    header(out, "collective_seconds_total", "counter", "Time spent in AllReduce calls, per rank, in seconds.");
    for (size_t r = 0; r < gauges.collectives.size(); ++r) {
        out << kPrefix << "collective_seconds_total{rank=\"" << r << "\"} " << gauges.collectives[r].seconds << '\n';
    }
    return out.str();
}

}  // namespace llama_tp::server
