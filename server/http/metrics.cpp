#include "server/http/metrics.h"

#include <algorithm>
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

void Metrics::count_step(int32_t n_prompt, int32_t n_generated, int32_t n_busy, double ms) {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    prompt_tokens_ += (uint64_t) n_prompt;
    generated_tokens_ += (uint64_t) n_generated;
    steps_++;
    busy_ms_ += ms;
    if (n_prompt > 0) prompt_ms_ += ms;
    if (n_generated > 0) generate_ms_ += ms;
    busy_slots_ += (uint64_t) std::max(0, n_busy);
    recent_.push_back({now, n_prompt, n_generated, ms});
    forget_old_steps(now);
}

void Metrics::count_finished(int32_t n_cached, int32_t n_tokens) {
    std::lock_guard<std::mutex> lock(mutex_);
    cached_tokens_ += (uint64_t) std::max(0, n_cached);
    longest_ = std::max(longest_, n_tokens);
}

void Metrics::count_drafts(int32_t n_drafted, int32_t n_accepted) {
    std::lock_guard<std::mutex> lock(mutex_);
    drafted_tokens_ += (uint64_t) std::max(0, n_drafted);
    accepted_tokens_ += (uint64_t) std::max(0, n_accepted);
    drafts_++;
    if ((size_t) std::max(0, n_drafted) > accepted_per_position_.size()) accepted_per_position_.resize(n_drafted, 0);
    for (int32_t i = 0; i < n_accepted && i < n_drafted; ++i) accepted_per_position_[i]++;
}

void Metrics::forget_old_steps(std::chrono::steady_clock::time_point now) const {
    while (!recent_.empty() && now - recent_.front().at > kWindow) {
        recent_.pop_front();
    }
}

// llama-server's series under its names, so that its dashboards keep working.
void Metrics::upstream_series(std::ostringstream & out, const SchedulerGauges & gauges, double prompt_rate,
                              double gen_rate) const {
    auto item = [&out](const char * type, const char * name, const char * help, double value) {
        out << "# HELP llamacpp:" << name << ' ' << help << '\n';
        out << "# TYPE llamacpp:" << name << ' ' << type << '\n';
        out << "llamacpp:" << name << ' ' << value << '\n';
    };
    item("counter", "prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens.",
         (double) prompt_tokens_);
    item("counter", "prompt_tokens_cached_total", "Number of prompt tokens reused from the cache.",
         (double) cached_tokens_);
    item("counter", "prompt_seconds_total", "Time spent in decode steps that processed prompt tokens.",
         prompt_ms_ / 1e3);
    item("counter", "tokens_predicted_total", "Number of generation tokens processed.", (double) generated_tokens_);
    item("counter", "tokens_predicted_seconds_total", "Time spent in decode steps that generated tokens.",
         generate_ms_ / 1e3);
    item("counter", "n_decode_total", "Decode steps.", (double) steps_);
    item("counter", "n_tokens_max", "Largest observed sequence length (prompt + generation).", (double) longest_);
    item("counter", "spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated",
         (double) drafted_tokens_);
    item("counter", "spec_decode_num_accepted_tokens_total",
         "Speculative: Total draft tokens accepted by the target model", (double) accepted_tokens_);
    item("counter", "spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps",
         (double) drafts_);
    if (!accepted_per_position_.empty()) {
        out << "# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position\n";
        out << "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter\n";
        for (size_t i = 0; i < accepted_per_position_.size(); ++i) {
            out << "llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"" << i << "\"} "
                << accepted_per_position_[i] << '\n';
        }
    }
    item("gauge", "prompt_tokens_seconds", "Prompt throughput in tokens/s over the last 10 s.", prompt_rate);
    item("gauge", "predicted_tokens_seconds", "Generation throughput in tokens/s over the last 10 s.", gen_rate);
    item("gauge", "requests_processing", "Number of requests processing.", gauges.busy_slots);
    item("gauge", "requests_deferred", "Number of requests deferred.", gauges.queued);
    item("gauge", "n_busy_slots_per_decode", "Average number of busy slots per decode step.",
         (double) busy_slots_ / std::max<double>((double) steps_, 1.0));
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

    const double prompt_rate = prompt_ms > 0 ? 1e3 * (double) prompt_n / prompt_ms : 0.0;
    const double gen_rate = gen_ms > 0 ? 1e3 * (double) gen_n / gen_ms : 0.0;

    std::ostringstream out;
    upstream_series(out, gauges, prompt_rate, gen_rate);
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
    sample(out, "prompt_tokens_per_second", prompt_rate);
    header(out, "predicted_tokens_per_second", "gauge", "Generation speed over the steps of the last 10 s.");
    sample(out, "predicted_tokens_per_second", gen_rate);
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
