#include "server/http/head_deadline_server.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace llama_tp::server {

namespace {

using Clock = std::chrono::steady_clock;

// How long a connection waits between requests before the server stops
// looking for a next one or for the server stopping.
constexpr int kStopCheckMs = 50;

int64_t to_ms(time_t sec, time_t usec) {
    return (int64_t) sec * 1000 + (int64_t) usec / 1000;
}

// poll() for one event: > 0 ready, 0 timed out, < 0 an error.
int wait_for(socket_t fd, short events, int64_t ms) {
    pollfd p{fd, events, 0};
    for (;;) {
        const int r = ::poll(&p, 1, (int) std::clamp<int64_t>(ms, 0, INT_MAX));
        if (r >= 0 || errno != EINTR) return r;
    }
}

// The address and port of either end of a connection ("" and 0 for a UNIX socket).
void address_of(socket_t fd, bool peer, std::string & ip, int & port) {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    ip.clear();
    port = 0;
    const int rc = peer ? getpeername(fd, (sockaddr *) &a, &len) : getsockname(fd, (sockaddr *) &a, &len);
    if (rc != 0) return;
    char text[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
        const auto * in = (const sockaddr_in *) &a;
        inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
        port = ntohs(in->sin_port);
    } else if (a.ss_family == AF_INET6) {
        const auto * in = (const sockaddr_in6 *) &a;
        inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof(text));
        port = ntohs(in->sin6_port);
    }
    ip = text;
}

// One connection's socket as cpp-httplib reads and writes it, buffered;
// while a request's line and headers are read, no read waits past their
// deadline.
class ConnectionStream final : public httplib::Stream {
  public:
    ConnectionStream(socket_t sock, int64_t read_ms, int64_t write_ms)
        : sock_(sock), read_ms_(read_ms), write_ms_(write_ms), start_(Clock::now()), buffer_(4096) {}

    void start_head(Clock::time_point deadline) {
        head_deadline_ = deadline;
        in_head_ = true;
    }
    void end_head() { in_head_ = false; }

    bool is_readable() const override { return begin_ < end_; }
    bool wait_readable() const override {
        const int64_t ms = read_wait_ms();
        return ms >= 0 && wait_for(sock_, POLLIN, ms) > 0;
    }
    // Whether the request head being read is late: the connection ends.
    bool late() const { return in_head_ && Clock::now() + std::chrono::milliseconds(10) >= head_deadline_; }
    bool wait_writable() const override { return wait_for(sock_, POLLOUT, write_ms_) > 0; }
    bool is_peer_alive() const override {
        char c = 0;
        const ssize_t n = ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
    }

    ssize_t read(char * ptr, size_t size) override {
        if (begin_ == end_) {
            if (!wait_readable()) {
                error_ = httplib::Error::Timeout;
                return -1;
            }
            ssize_t n = 0;
            do {
                n = ::recv(sock_, buffer_.data(), buffer_.size(), 0);
            } while (n < 0 && errno == EINTR);
            if (n <= 0) {
                error_ = n == 0 ? httplib::Error::ConnectionClosed : httplib::Error::Read;
                return n;
            }
            begin_ = 0;
            end_ = (size_t) n;
        }
        const size_t n = std::min(size, end_ - begin_);
        std::copy(buffer_.data() + begin_, buffer_.data() + begin_ + n, ptr);
        begin_ += n;
        return (ssize_t) n;
    }

    ssize_t write(const char * ptr, size_t size) override {
        if (!wait_writable()) return -1;
        ssize_t n = 0;
        do {
            n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        return n;
    }

    void get_remote_ip_and_port(std::string & ip, int & port) const override { address_of(sock_, true, ip, port); }
    void get_local_ip_and_port(std::string & ip, int & port) const override { address_of(sock_, false, ip, port); }
    socket_t socket() const override { return sock_; }
    time_t duration() const override {
        return (time_t) std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_).count();
    }
    void set_read_timeout(time_t sec, time_t usec) override { read_ms_ = to_ms(sec, usec); }
    const char * buffered_data(size_t & size) const override {
        size = end_ - begin_;
        return size ? buffer_.data() + begin_ : nullptr;
    }
    void consume_buffered(size_t size) override { begin_ += std::min(size, end_ - begin_); }

  private:
    // How long a read may wait; -1: the request head is late.
    int64_t read_wait_ms() const {
        if (!in_head_) return read_ms_;
        const int64_t left =
            std::chrono::duration_cast<std::chrono::milliseconds>(head_deadline_ - Clock::now()).count();
        return left <= 0 ? -1 : std::min(read_ms_, left);
    }

    const socket_t sock_;
    int64_t read_ms_;
    const int64_t write_ms_;
    const Clock::time_point start_;
    Clock::time_point head_deadline_{};
    bool in_head_ = false;
    std::vector<char> buffer_;
    size_t begin_ = 0, end_ = 0;
};

// Sends what is left, lets the client see the end of the response before
// the socket goes (unread bytes would reset it), and closes it.
void drain_and_close(socket_t sock) {
    ::shutdown(sock, SHUT_WR);
    char scratch[4096];
    for (int i = 0; i < 16 && wait_for(sock, POLLIN, 10) > 0; ++i) {
        if (::recv(sock, scratch, sizeof(scratch), MSG_DONTWAIT) <= 0) break;
    }
    ::close(sock);
}

}  // namespace

bool HeadDeadlineServer::process_and_close_socket(socket_t sock) {
    std::string remote_addr, local_addr;
    int remote_port = 0, local_port = 0;
    address_of(sock, true, remote_addr, remote_port);
    address_of(sock, false, local_addr, local_port);
    ConnectionStream strm(sock, to_ms(read_timeout_sec_, read_timeout_usec_),
                          to_ms(write_timeout_sec_, write_timeout_usec_));
    // The next request's first byte, within the keep-alive wait (checking
    // now and then whether the server stops).
    auto next_request = [&] {
        const auto until = Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
        while (svr_sock_ != INVALID_SOCKET) {
            if (strm.is_readable()) return true;
            const int r = wait_for(sock, POLLIN, kStopCheckMs);
            if (r != 0) return r > 0;
            if (Clock::now() >= until) return false;
        }
        return false;
    };
    const bool ok = serve_guarded([&] {
        bool ret = false;
        for (size_t left = keep_alive_max_count_; left > 0 && next_request(); --left) {
            strm.start_head(Clock::now() + std::chrono::seconds(head_deadline_s_));
            bool closed = false;
            ret = process_request(strm, remote_addr, remote_port, local_addr, local_port, left == 1, closed,
                                  [&strm](httplib::Request &) { strm.end_head(); });
            if (!ret || closed || strm.late()) break;
        }
        return ret;
    });
    drain_and_close(sock);
    return ok;
}

}  // namespace llama_tp::server
