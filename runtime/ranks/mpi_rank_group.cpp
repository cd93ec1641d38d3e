#include "runtime/ranks/mpi_rank_group.h"

#include "runtime/error.h"

#include <cstdio>
#include <cstring>
#include <sstream>

namespace llama_tp {
namespace {

template <typename T>
void append(std::vector<uint8_t> & out, const T * values, size_t n) {
    const size_t at = out.size();
    out.resize(at + n * sizeof(T));
    if (n) std::memcpy(out.data() + at, values, n * sizeof(T));
}

// "key: value" lines as pairs, in order.
std::vector<std::pair<std::string, std::string>> lines_of(const std::string & text) {
    std::vector<std::pair<std::string, std::string>> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        const size_t colon = line.find(": ");
        out.emplace_back(line.substr(0, colon), colon == std::string::npos ? "" : line.substr(colon + 2));
    }
    return out;
}

// What differs between process 0's setup and another's, or "".
std::string difference(const std::string & ours, const std::string & theirs) {
    const auto a = lines_of(ours), b = lines_of(theirs);
    for (size_t i = 0; i < a.size() || i < b.size(); ++i) {
        const std::string key = i < a.size() ? a[i].first : b[i].first;
        const std::string va = i < a.size() ? a[i].second : "(none)", vb = i < b.size() ? b[i].second : "(none)";
        if (i >= a.size() || i >= b.size() || a[i] != b[i])
            return key + " is " + vb + " there, " + va + " on process 0";
    }
    return "";
}

std::string text_of(const std::vector<uint8_t> & bytes) {
    return std::string(bytes.begin(), bytes.end());
}

}  // namespace

void MpiRankGroup::agree(ProcessGroup & processes, const std::string & setup, const std::string & source) {
    // Two lines before the setup: the host, and the source (one line).
    const std::string mine = processes.host() + "\n" + source + "\n" + setup;
    std::vector<std::vector<uint8_t>> parts;
    processes.gather(std::vector<uint8_t>(mine.begin(), mine.end()), processes.rank() == 0 ? &parts : nullptr,
                     Patience::Startup);
    auto named = [](const std::string & host, const std::string & from) {
        return host + (from.empty() ? "" : " (" + from + ")");
    };
    std::string verdict;
    if (processes.rank() == 0) {
        for (int p = 1; p < processes.size() && verdict.empty(); ++p) {
            const std::string theirs = text_of(parts[p]);
            const size_t host_end = theirs.find('\n');
            const size_t source_end = host_end == std::string::npos ? host_end : theirs.find('\n', host_end + 1);
            if (source_end == std::string::npos) {
                verdict = "process " + std::to_string(p) + " sent a malformed setup";
                break;
            }
            const std::string what = difference(setup, theirs.substr(source_end + 1));
            if (!what.empty()) {
                verdict = "process " + std::to_string(p) + " on " +
                          named(theirs.substr(0, host_end), theirs.substr(host_end + 1, source_end - host_end - 1)) +
                          " does not match process 0 on " + named(processes.host(), source) + ": " + what;
            }
        }
    }
    std::vector<uint8_t> bytes(verdict.begin(), verdict.end());
    processes.broadcast(bytes, Patience::Startup);
    if (!bytes.empty()) {
        processes.end_together();  // every process refuses with the same message
        throw Error("refusing to start: " + text_of(bytes));
    }
}

MpiRankGroup::MpiRankGroup(ProcessGroup & processes, std::unique_ptr<RankGroup> local, std::vector<ShardRange> vocab,
                           int32_t n_vocab, std::vector<std::vector<ShardRange>> kv_heads,
                           std::function<KvImageLayout(int32_t)> image_layout)
    : processes_(processes),
      local_(std::move(local)),
      vocab_(std::move(vocab)),
      kv_heads_(std::move(kv_heads)),
      image_layout_(std::move(image_layout)),
      n_vocab_(n_vocab),
      n_local_(local_->n_ranks()),
      n_ranks_(local_->n_ranks() * processes.size()),
      stats_(n_ranks_) {
    gather_reports();
    last_step_ = std::chrono::steady_clock::now();
    if (processes_.rank() == 0 && processes_.size() > 1) beat_thread_ = std::thread([this] { beat(); });
}

MpiRankGroup::~MpiRankGroup() {
    if (processes_.rank() != 0) return;
    if (beat_thread_.joinable()) {
        {
            std::lock_guard<std::mutex> lock(beat_mutex_);
            beat_stop_ = true;
        }
        beat_cv_.notify_all();
        beat_thread_.join();
    }
    // Also after a failed step: followers waiting for the next step end
    // cleanly. Where a wait was abandoned the broadcast refuses at once and
    // the process group ends the job instead.
    try {
        Step shutdown;
        shutdown.kind = Step::Kind::Shutdown;
        std::vector<uint8_t> bytes = shutdown.encode();
        processes_.broadcast(bytes);
        processes_.end_together();
    } catch (const std::exception & e) {
        // The process group then ends the job when it goes.
        std::fprintf(stderr, "llama-tp: could not end the followers: %s\n", e.what());
    }
}

void MpiRankGroup::gather_reports() {
    const std::vector<RankReport> mine = local_->reports();
    std::vector<uint8_t> bytes;
    append(bytes, mine.data(), mine.size());
    std::vector<std::vector<uint8_t>> parts;
    processes_.gather(bytes, processes_.rank() == 0 ? &parts : nullptr, Patience::Startup);
    for (const auto & part : parts) {
        const size_t n = part.size() / sizeof(RankReport);
        const size_t at = reports_.size();
        reports_.resize(at + n);
        std::memcpy(reports_.data() + at, part.data(), n * sizeof(RankReport));
    }
    if (processes_.rank() != 0) reports_ = mine;
}

std::vector<uint8_t> MpiRankGroup::pack(const std::vector<float> & rows, size_t n_rows) const {
    std::vector<uint8_t> out;
    const std::vector<CollectiveStats> stats = local_->collective_stats();
    append(out, stats.data(), stats.size());
    const ShardRange & v = vocab_[processes_.rank()];
    for (size_t r = 0; r < n_rows; ++r) append(out, rows.data() + r * n_vocab_ + v.begin, (size_t) v.size());
    return out;
}

void MpiRankGroup::unpack(int process, const std::vector<uint8_t> & part, size_t n_rows, float * logits) {
    const ShardRange & v = vocab_[process];
    const size_t stats_bytes = n_local_ * sizeof(CollectiveStats);
    if (part.size() != stats_bytes + n_rows * (size_t) v.size() * sizeof(float)) {
        throw Error("process " + std::to_string(process) + " sent " + std::to_string(part.size()) +
                    " bytes of logits, not the expected " +
                    std::to_string(stats_bytes + n_rows * (size_t) v.size() * sizeof(float)));
    }
    {
        std::lock_guard<std::mutex> lock(stats_mutex_);
        std::memcpy(stats_.data() + (size_t) process * n_local_, part.data(), stats_bytes);
    }
    const uint8_t * at = part.data() + stats_bytes;
    for (size_t r = 0; r < n_rows; ++r, at += v.size() * sizeof(float)) {
        std::memcpy(logits + r * n_vocab_ + v.begin, at, v.size() * sizeof(float));
    }
}

std::string MpiRankGroup::failure() const {
    {
        std::lock_guard<std::mutex> lock(failure_mutex_);
        if (!failure_.empty()) return failure_;
    }
    return local_->failure();
}

void MpiRankGroup::drive(const Step & step, const std::function<void()> & here, const Join & join, Patience patience) {
    std::lock_guard<std::mutex> step_lock(step_mutex_);
    const std::string failed = failure();
    if (!failed.empty()) throw Error("the rank group has failed: " + failed);
    try {
        std::vector<uint8_t> bytes = step.encode();
        processes_.broadcast(bytes, patience);
        here();
        std::vector<std::vector<uint8_t>> parts;
        processes_.gather({}, &parts, patience);
        for (int p = 1; p < processes_.size(); ++p) join(p, parts[p]);
        last_step_ = std::chrono::steady_clock::now();
    } catch (const std::exception & e) {
        std::lock_guard<std::mutex> lock(failure_mutex_);
        if (failure_.empty()) failure_ = e.what();
        throw;
    }
}

void MpiRankGroup::beat() {
    using Clock = std::chrono::steady_clock;
    const auto interval =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kHeartbeatInterval_s));
    Step heartbeat;
    heartbeat.kind = Step::Kind::Heartbeat;
    // The first waits as start-up does: a follower may still finish its load.
    Patience patience = Patience::Startup;
    std::unique_lock<std::mutex> lock(beat_mutex_);
    while (!beat_cv_.wait_for(lock, interval / 4, [&] { return beat_stop_; })) {
        {
            std::lock_guard<std::mutex> step_lock(step_mutex_);
            if (Clock::now() - last_step_ < interval) continue;
        }
        if (!failure().empty()) return;
        lock.unlock();
        try {
            drive(
                heartbeat, [] {}, [](int, const std::vector<uint8_t> &) {}, patience);
        } catch (const std::exception & e) {
            std::fprintf(stderr, "llama-tp: heartbeat: %s\n", e.what());
            return;  // failure() says why
        }
        patience = Patience::Step;
        lock.lock();
    }
}

void MpiRankGroup::run(const Step & step, float * logits) {
    const size_t n_rows = output_rows(step.batch).size();
    // Process 0's own slices are in place already.
    drive(
        step, [&] { local_->run(step, logits); },
        [&](int p, const std::vector<uint8_t> & part) { unpack(p, part, n_rows, logits); });
}

void MpiRankGroup::read(const Step & step, uint8_t * image) {
    const KvImageLayout l = image_layout_(step.read_n);
    drive(
        step, [&] { local_->read(step, image); },
        [&](int p, const std::vector<uint8_t> & part) {
            if (part.size() != l.bytes()) {
                throw Error("process " + std::to_string(p) + " sent " + std::to_string(part.size()) +
                            " bytes of KV cells, not " + std::to_string(l.bytes()));
            }
            // Its heads of every cell of every layer, keys and values.
            for (int32_t il = 0; il < l.n_layer(); ++il) {
                if (l.layers[il].n_head_kv == 0) continue;  // linear attention: its states follow
                const ShardRange & h = kv_heads_[p][il];
                for (const bool values : {false, true}) {
                    const size_t n = l.layers[il].head_bytes(values) * (size_t) h.size();
                    for (int32_t c = 0; c < l.layers[il].n_cells; ++c) {
                        const size_t at = l.offset(il, values, c, (int32_t) h.begin);
                        std::memcpy(image + at, part.data() + at, n);
                    }
                }
            }
            // Its key heads' states of every linear-attention layer.
            for (size_t s = 0; s < l.states.size(); ++s) {
                const ShardRange & k = kv_heads_[p][l.states[s].il];
                for (const bool delta : {false, true}) {
                    for (const auto & [at, n] : delta ? l.delta_spans(s, k) : l.conv_spans(s, k)) {
                        std::memcpy(image + at, part.data() + at, n);
                    }
                }
            }
        });
}

void MpiRankGroup::follow_read(const Step & step) {
    std::vector<uint8_t> image(image_layout_(step.read_n).bytes());
    local_->read(step, image.data());
    processes_.gather(image, nullptr);
}

void MpiRankGroup::follow() {
    for (;;) {
        std::vector<uint8_t> bytes;
        processes_.broadcast(bytes, Patience::Idle);
        const Step step = Step::decode(bytes);
        if (step.kind == Step::Kind::Shutdown) {
            processes_.end_together();
            return;
        }
        if (step.kind == Step::Kind::Heartbeat) {
            processes_.gather({}, nullptr);
            continue;
        }
        if (step.kind == Step::Kind::Read) {
            follow_read(step);
            continue;
        }
        const size_t n_rows = output_rows(step.batch).size();
        rows_.resize(n_rows * (size_t) n_vocab_);
        local_->run(step, rows_.data());
        processes_.gather(pack(rows_, n_rows), nullptr);
    }
}

std::vector<CollectiveStats> MpiRankGroup::collective_stats() const {
    if (processes_.rank() != 0) return local_->collective_stats();
    std::lock_guard<std::mutex> lock(stats_mutex_);
    std::vector<CollectiveStats> out = stats_;
    const std::vector<CollectiveStats> mine = local_->collective_stats();
    std::copy(mine.begin(), mine.end(), out.begin());
    return out;
}

}  // namespace llama_tp
