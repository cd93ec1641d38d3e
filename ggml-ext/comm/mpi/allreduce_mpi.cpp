#include "ggml-ext/comm/mpi/allreduce_mpi.h"

#include "ggml-ext/comm/allreduce_backoff.h"
#include "ggml-ext/comm/allreduce_wire.h"
#include "ggml-ext/error.h"
#include "ggml-ext/comm/mpi/mpi_wait.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <type_traits>

namespace llama_tp {
namespace {

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
    return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
    return MPI_DOUBLE;
}
template <>
MPI_Datatype mpi_type<uint16_t>() {
    return MPI_UINT16_T;
}

// Up to this size, and always between two processes, messages go by exchange.
constexpr size_t kExchangeBytes = 64 << 10;

uint16_t bf16_bits(float x) {
    const float r = round_to_bf16(x);
    uint32_t bits;
    std::memcpy(&bits, &r, sizeof bits);
    return (uint16_t) (bits >> 16);
}

float from_bf16_bits(uint16_t b) {
    const uint32_t bits = (uint32_t) b << 16;
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
}

}  // namespace

MpiAllReduce::MpiAllReduce(MPI_Comm data, MpiPeers peers, const AllReduceConfig & config)
    : comm_(data),
      peers_(std::move(peers)),
      n_local_(config.n_ranks),
      first_rank_(peers_.process * config.n_ranks),
      wire_(config.wire.value_or(WireType::F32)),
      timeout_s_(config.timeout_s),
      slots_(config.n_ranks) {
    if (n_local_ < 1) throw Error("allreduce engine mpi needs at least 1 rank per process");
}

std::string MpiAllReduce::process_text(int process) const {
    const int r0 = process * n_local_;
    const std::string ranks = n_local_ == 1 ? "rank " + std::to_string(r0)
                                            : "ranks " + std::to_string(r0) + "-" + std::to_string(r0 + n_local_ - 1);
    return ranks + " (process " + std::to_string(process) + " on " + peers_.hosts[process] + ")";
}

template <typename T>
void MpiAllReduce::run(int rank, T * data, size_t n) {
    const int local = rank - first_rank_;
    if (local < 0 || local >= n_local_) {
        failure_.fail([&] { return bad_rank_message(rank, n_ranks()); });
        return;
    }
    LocalSlot & me = slots_[local];
    me.data = data;
    me.n = n;
    me.element_size = sizeof(T);
    // Counted on failure too, so that every rank's call numbers stay in step.
    const uint64_t call = ++me.calls;
    if (local == 0) {
        // Entered before the failed check, all of it seq_cst: a rank that saw
        // the group failed and this call not entered yet may leave, because
        // the leader will then see the failure too and touch no buffer.
        leader_entered_.store(call);
        try {
            if (!failed()) lead(data, n, call);
        } catch (...) {
            failure_.fail([] { return "allreduce: out of memory"; });
        }
        released_.store(call, std::memory_order_release);
        return;
    }
    me.arrived.store(call, std::memory_order_release);
    Backoff backoff = Backoff::unbounded();
    while (released_.load(std::memory_order_acquire) < call) {
        if (failed() && leader_entered_.load() < call) return;
        backoff.pause();
    }
}

// Sums every local rank's values into the leader's buffer, then across
// processes, and writes the result into the other local buffers. The
// caller releases the call however this ends.
template <typename T>
void MpiAllReduce::lead(T * data, size_t n, uint64_t call) {
    std::string why;
    if (!await_local_ranks(call)) {
        // failure_.fail() was called with the missing ranks.
    } else if (!local_counts_match(why)) {
        failure_.fail([&] { return why; });
    } else {
        if (n_local_ > 1) wire_copy(data, data, n, wire_);
        for (int r = 1; r < n_local_; ++r) wire_add(data, static_cast<const T *>(slots_[r].data), n, wire_);
        if (across_processes(data, n)) {
            for (int r = 1; r < n_local_; ++r) std::memcpy(slots_[r].data, data, n * sizeof(T));
        }
    }
}

bool MpiAllReduce::await_local_ranks(uint64_t call) {
    Backoff backoff(timeout_s_);
    for (int r = 1; r < n_local_; ++r) {
        while (slots_[r].arrived.load(std::memory_order_acquire) < call) {
            if (failed()) return false;
            if (!backoff.pause()) {
                failure_.fail([&] {
                    return "allreduce: rank " + std::to_string(first_rank_ + r) + " did not arrive within " +
                           std::to_string((int) timeout_s_) + " s";
                });
                return false;
            }
        }
    }
    return !failed();
}

bool MpiAllReduce::local_counts_match(std::string & why) const {
    std::vector<std::pair<int, size_t>> counts, sizes;
    bool same = true, same_types = true;
    for (int r = 0; r < n_local_; ++r) {
        counts.emplace_back(first_rank_ + r, slots_[r].n);
        sizes.emplace_back(first_rank_ + r, slots_[r].element_size);
        same = same && slots_[r].n == slots_[0].n;
        same_types = same_types && slots_[r].element_size == slots_[0].element_size;
    }
    if (!same_types)
        why = mismatched_types_message(sizes);
    else if (!same)
        why = mismatched_counts_message(counts);
    return same && same_types;
}

bool MpiAllReduce::outcome(int rc, const char * what) {
    if (rc == MPI_SUCCESS) return true;
    if (peers_.abandoned) peers_.abandoned->store(true);
    if (failed()) return false;  // aborted from outside: that reason stands
    if (rc == MPI_ERR_PENDING) {
        failure_.fail([&] {
            std::string who;
            const int n_processes = (int) peers_.hosts.size();
            for (int p = 0; p < n_processes; ++p) {
                if (p != peers_.process) who += (who.empty() ? "" : ", ") + process_text(p);
            }
            return std::string("allreduce: ") + what + " did not complete within " + std::to_string((int) timeout_s_) +
                   " s: " + (n_processes == 2 ? who + " stopped answering" : "one of " + who + " stopped answering");
        });
    } else {
        failure_.fail([&] { return std::string("allreduce: ") + what + " failed: " + mpi_error_text(rc); });
    }
    return false;
}

template <typename T>
bool MpiAllReduce::across_processes(T * data, size_t n) {
    const size_t n_processes = peers_.hosts.size();
    if (n_processes == 1) return true;
    if (peers_.abandoned && peers_.abandoned->load()) {
        // Another wait was abandoned: no more MPI calls (their buffers may be in use).
        failure_.fail([] { return "allreduce: the process group has failed"; });
        return false;
    }
    if (n > (size_t) INT_MAX / n_processes) {
        failure_.fail([&] { return "allreduce: " + std::to_string(n) + " elements are more than one MPI call takes"; });
        return false;
    }
    if constexpr (std::is_same_v<T, float>) {
        if (wire_ == WireType::BF16) return exchange_sum_bf16(data, n);
    }
    if (n_processes == 2 || n * sizeof(T) <= kExchangeBytes) return exchange_sum(data, n);
    return iallreduce(data, n);
}

template <typename T>
bool MpiAllReduce::iallreduce(T * data, size_t n) {
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, data, (int) n, mpi_type<T>(), MPI_SUM, comm_, &request);
    if (rc == MPI_SUCCESS) {
        Backoff backoff(timeout_s_);
        rc = mpi_wait(request, backoff, &failure_.flag());
    }
    return outcome(rc, "MPI_Iallreduce");
}

template <typename W>
bool MpiAllReduce::exchange(const W * mine, W * theirs, size_t n) {
    const int n_processes = (int) peers_.hosts.size();
    requests_.assign(2 * (n_processes - 1), MPI_REQUEST_NULL);
    const MPI_Datatype type = mpi_type<W>();
    int rc = MPI_SUCCESS;
    size_t r = 0;
    for (int p = 0; p < n_processes && rc == MPI_SUCCESS; ++p) {
        if (p != peers_.process) rc = MPI_Irecv(theirs + (size_t) p * n, (int) n, type, p, 0, comm_, &requests_[r++]);
    }
    for (int p = 0; p < n_processes && rc == MPI_SUCCESS; ++p) {
        if (p != peers_.process) rc = MPI_Isend(mine, (int) n, type, p, 0, comm_, &requests_[r++]);
    }
    if (rc == MPI_SUCCESS) {
        Backoff backoff(timeout_s_);
        rc = mpi_wait_all(requests_, statuses_, backoff, &failure_.flag());
    }
    if (!outcome(rc, "the exchange between processes")) return false;
    // A shorter message is received without an error: every process must send n values.
    for (size_t i = 0; i + 1 < (size_t) n_processes; ++i) {
        int count = 0;
        MPI_Get_count(&statuses_[i], type, &count);
        if (count != (int) n) {
            const int from = statuses_[i].MPI_SOURCE;
            failure_.fail([&] {
                return "allreduce: process " + std::to_string(from) + " sent " + std::to_string(count) +
                       " values where this process has " + std::to_string(n) +
                       " (the processes disagree on the model or the step)";
            });
            return false;
        }
    }
    return true;
}

// Every process adds the same values in the same (process) order.
template <typename T>
bool MpiAllReduce::exchange_sum(T * data, size_t n) {
    const size_t n_processes = peers_.hosts.size(), me = peers_.process;
    received_.resize(n_processes * n * sizeof(T));
    T * theirs = reinterpret_cast<T *>(received_.data());
    if (!exchange(data, theirs, n)) return false;
    std::memcpy(theirs + me * n, data, n * sizeof(T));
    std::memcpy(data, theirs, n * sizeof(T));
    for (size_t p = 1; p < n_processes; ++p) {
        const T * part = theirs + p * n;
        for (size_t i = 0; i < n; ++i) data[i] += part[i];
    }
    return true;
}

bool MpiAllReduce::exchange_sum_bf16(float * data, size_t n) {
    const size_t n_processes = peers_.hosts.size(), me = peers_.process;
    bf16_send_.resize(n);
    bf16_recv_.resize(n * n_processes);
    for (size_t i = 0; i < n; ++i) bf16_send_[i] = bf16_bits(data[i]);
    if (!exchange(bf16_send_.data(), bf16_recv_.data(), n)) return false;
    std::copy(bf16_send_.begin(), bf16_send_.end(), bf16_recv_.begin() + me * n);
    for (size_t i = 0; i < n; ++i) data[i] = from_bf16_bits(bf16_recv_[i]);
    for (size_t p = 1; p < n_processes; ++p) {
        const uint16_t * part = bf16_recv_.data() + p * n;
        for (size_t i = 0; i < n; ++i) data[i] += from_bf16_bits(part[i]);
    }
    return true;
}

template void MpiAllReduce::run<float>(int, float *, size_t);
template void MpiAllReduce::run<double>(int, double *, size_t);

}  // namespace llama_tp
