#include "server/http/head_deadline_server.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <memory>
#include <type_traits>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
#include <openssl/err.h>
#include <openssl/ssl.h>
#endif

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

int64_t ms_until(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
}

// A connection's bytes, plain or through TLS.
class Transport {
  public:
    explicit Transport(socket_t sock) : sock_(sock) {}
    virtual ~Transport() = default;

    socket_t socket() const { return sock_; }
    // Bytes received and decoded but not yet read (TLS).
    virtual bool has_pending() const { return false; }
    // Up to `size` bytes, waiting at most wait_ms in all: > 0 bytes, 0 the
    // peer closed, -1 an error or the wait out (`error` says which).
    virtual ssize_t read(char * ptr, size_t size, int64_t wait_ms, httplib::Error & error) = 0;
    virtual ssize_t write(const char * ptr, size_t size, int64_t wait_ms) = 0;
    // The protocol's own end before the socket closes.
    virtual void finish() {}

  protected:
    const socket_t sock_;
};

class PlainTransport final : public Transport {
  public:
    using Transport::Transport;

    ssize_t read(char * ptr, size_t size, int64_t wait_ms, httplib::Error & error) override {
        if (wait_for(sock_, POLLIN, wait_ms) <= 0) {
            error = httplib::Error::Timeout;
            return -1;
        }
        ssize_t n = 0;
        do {
            n = ::recv(sock_, ptr, size, 0);
        } while (n < 0 && errno == EINTR);
        if (n <= 0) error = n == 0 ? httplib::Error::ConnectionClosed : httplib::Error::Read;
        return n;
    }

    ssize_t write(const char * ptr, size_t size, int64_t wait_ms) override {
        if (wait_for(sock_, POLLOUT, wait_ms) <= 0) return -1;
        ssize_t n = 0;
        do {
            n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        return n;
    }
};

#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
// A TLS session over a non-blocking socket: every wait of OpenSSL's for
// the socket is a poll() with what is left of the caller's time.
class TlsTransport final : public Transport {
  public:
    // The server's side of the handshake, done by `deadline` (each wait
    // also within wait_ms); null when it fails or is late.
    static std::unique_ptr<TlsTransport> accept(SSL_CTX * ctx, socket_t sock, Clock::time_point deadline,
                                                int64_t wait_ms) {
        SSL * ssl = SSL_new(ctx);
        if (!ssl) return nullptr;
        std::unique_ptr<TlsTransport> t(new TlsTransport(sock, ssl));
        const int flags = ::fcntl(sock, F_GETFL, 0);
        if (flags < 0 || ::fcntl(sock, F_SETFL, flags | O_NONBLOCK) < 0 || SSL_set_fd(ssl, sock) != 1) {
            return nullptr;
        }
        for (;;) {
            ERR_clear_error();
            const int r = SSL_accept(ssl);
            if (r == 1) return t;
            if (!t->wait(r, std::min(wait_ms, ms_until(deadline)))) return nullptr;
        }
    }

    ~TlsTransport() override { SSL_free(ssl_); }

    bool has_pending() const override { return SSL_pending(ssl_) > 0; }

    ssize_t read(char * ptr, size_t size, int64_t wait_ms, httplib::Error & error) override {
        const auto until = Clock::now() + std::chrono::milliseconds(wait_ms);
        for (;;) {
            ERR_clear_error();
            const int n = SSL_read(ssl_, ptr, (int) std::min<size_t>(size, INT_MAX));
            if (n > 0) return n;
            if (SSL_get_error(ssl_, n) == SSL_ERROR_ZERO_RETURN) {
                error = httplib::Error::ConnectionClosed;
                return 0;
            }
            if (!wait(n, ms_until(until))) {
                error = retryable(n) ? httplib::Error::Timeout : httplib::Error::Read;
                return -1;
            }
        }
    }

    ssize_t write(const char * ptr, size_t size, int64_t wait_ms) override {
        const auto until = Clock::now() + std::chrono::milliseconds(wait_ms);
        for (;;) {
            ERR_clear_error();
            const int n = SSL_write(ssl_, ptr, (int) std::min<size_t>(size, INT_MAX));
            if (n > 0) return n;
            if (!wait(n, ms_until(until))) return -1;
        }
    }

    // close_notify, once, without waiting for the client's.
    void finish() override {
        ERR_clear_error();
        SSL_shutdown(ssl_);
    }

  private:
    TlsTransport(socket_t sock, SSL * ssl) : Transport(sock), ssl_(ssl) {}

    bool retryable(int r) const {
        const int e = SSL_get_error(ssl_, r);
        return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE;
    }

    // After an OpenSSL call returned r: waits for what it wants of the
    // socket; false for an error or the wait out.
    bool wait(int r, int64_t ms) const {
        const int e = SSL_get_error(ssl_, r);
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) return false;
        return ms > 0 && wait_for(sock_, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, ms) > 0;
    }

    SSL * const ssl_;
};
#endif

// One connection as cpp-httplib reads and writes it, buffered; while a
// request's line and headers are read, no read waits past their deadline.
class ConnectionStream final : public httplib::Stream {
  public:
    ConnectionStream(Transport & transport, int64_t read_ms, int64_t write_ms)
        : transport_(transport), read_ms_(read_ms), write_ms_(write_ms), start_(Clock::now()), buffer_(16384) {}

    void start_head(Clock::time_point deadline) {
        head_deadline_ = deadline;
        in_head_ = true;
    }
    void end_head() { in_head_ = false; }

    bool is_readable() const override { return begin_ < end_ || transport_.has_pending(); }
    bool wait_readable() const override {
        if (is_readable()) return true;
        const int64_t ms = read_wait_ms();
        return ms >= 0 && wait_for(transport_.socket(), POLLIN, ms) > 0;
    }
    // Whether the request head being read is late: the connection ends.
    bool late() const { return in_head_ && Clock::now() + std::chrono::milliseconds(10) >= head_deadline_; }
    bool wait_writable() const override { return wait_for(transport_.socket(), POLLOUT, write_ms_) > 0; }
    bool is_peer_alive() const override {
        char c = 0;
        const ssize_t n = ::recv(transport_.socket(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
    }

    ssize_t read(char * ptr, size_t size) override {
        if (begin_ == end_) {
            const int64_t ms = read_wait_ms();
            if (ms < 0) {
                error_ = httplib::Error::Timeout;
                return -1;
            }
            const ssize_t n = transport_.read(buffer_.data(), buffer_.size(), ms, error_);
            if (n <= 0) return n;
            begin_ = 0;
            end_ = (size_t) n;
        }
        const size_t n = std::min(size, end_ - begin_);
        std::copy(buffer_.data() + begin_, buffer_.data() + begin_ + n, ptr);
        begin_ += n;
        return (ssize_t) n;
    }

    ssize_t write(const char * ptr, size_t size) override { return transport_.write(ptr, size, write_ms_); }

    void get_remote_ip_and_port(std::string & ip, int & port) const override {
        address_of(transport_.socket(), true, ip, port);
    }
    void get_local_ip_and_port(std::string & ip, int & port) const override {
        address_of(transport_.socket(), false, ip, port);
    }
    socket_t socket() const override { return transport_.socket(); }
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
        const int64_t left = ms_until(head_deadline_);
        return left <= 0 ? -1 : std::min(read_ms_, left);
    }

    Transport & transport_;
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

// The connection's transport: the socket itself, or a TLS session once its
// handshake is done by the head deadline (null if not).
template <class Base>
std::unique_ptr<Transport> open_transport(const Base & server, socket_t sock, Clock::time_point deadline,
                                          int64_t wait_ms) {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
    if constexpr (std::is_base_of_v<httplib::SSLServer, Base>) {
        return TlsTransport::accept(static_cast<SSL_CTX *>(server.tls_context()), sock, deadline, wait_ms);
    }
#endif
    (void) server, (void) deadline, (void) wait_ms;
    return std::make_unique<PlainTransport>(sock);
}

}  // namespace

template <class Base>
bool HeadDeadlineServerOf<Base>::process_and_close_socket(socket_t sock) {
    const int64_t read_ms = to_ms(this->read_timeout_sec_, this->read_timeout_usec_);
    const std::unique_ptr<Transport> transport =
        open_transport<Base>(*this, sock, Clock::now() + std::chrono::seconds(head_deadline_s_), read_ms);
    if (!transport) {
        drain_and_close(sock);
        return false;
    }
    std::string remote_addr, local_addr;
    int remote_port = 0, local_port = 0;
    address_of(sock, true, remote_addr, remote_port);
    address_of(sock, false, local_addr, local_port);
    ConnectionStream strm(*transport, read_ms, to_ms(this->write_timeout_sec_, this->write_timeout_usec_));
    // The next request's first byte, within the keep-alive wait (checking
    // now and then whether the server stops).
    auto next_request = [&] {
        const auto until = Clock::now() + std::chrono::seconds(this->keep_alive_timeout_sec_);
        while (this->svr_sock_ != INVALID_SOCKET) {
            if (strm.is_readable()) return true;
            const int r = wait_for(sock, POLLIN, kStopCheckMs);
            if (r != 0) return r > 0;
            if (Clock::now() >= until) return false;
        }
        return false;
    };
    const bool ok = this->serve_guarded([&] {
        bool ret = false;
        for (size_t left = this->keep_alive_max_count_; left > 0 && next_request(); --left) {
            strm.start_head(Clock::now() + std::chrono::seconds(head_deadline_s_));
            bool closed = false;
            ret = this->process_request(strm, remote_addr, remote_port, local_addr, local_port, left == 1, closed,
                                        [&strm](httplib::Request &) { strm.end_head(); });
            if (!ret || closed || strm.late()) break;
        }
        return ret;
    });
    transport->finish();
    drain_and_close(sock);
    return ok;
}

template class HeadDeadlineServerOf<httplib::Server>;
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
template class HeadDeadlineServerOf<httplib::SSLServer>;
#endif

}  // namespace llama_tp::server
