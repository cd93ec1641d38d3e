#include "server/http/listener.h"

#include "server/http/head_deadline_server.h"

#include <cpp-httplib/httplib.h>

#include <algorithm>
#include <stdexcept>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace llama_tp::server {

namespace {

constexpr size_t kMaxHttpThreads = 512;
constexpr int kSilentConnectionS = 30;
// A request's line and headers, and a TLS handshake, arrive within this
// long from their first byte (and within --timeout).
constexpr int kRequestHeadS = 30;

// HTTPS with --ssl-key-file and --ssl-cert-file (both or neither), else HTTP.
std::unique_ptr<httplib::Server> make_server(const ServerOptions & o) {
    if (o.ssl_key_file.empty() != o.ssl_cert_file.empty()) {
        throw std::runtime_error(
            "--ssl-key-file and --ssl-cert-file go together: give both, or neither for plain HTTP");
    }
    const int head_deadline_s = std::clamp<int>(o.timeout_s, 1, kRequestHeadS);
    if (o.ssl_key_file.empty()) return std::make_unique<HeadDeadlineServer>(head_deadline_s);
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
    auto ssl =
        std::make_unique<HeadDeadlineTlsServer>(head_deadline_s, o.ssl_cert_file.c_str(), o.ssl_key_file.c_str());
    if (!ssl->is_valid()) {
        throw std::runtime_error("cannot use the certificate '" + o.ssl_cert_file + "' with the key '" +
                                 o.ssl_key_file + "' (unreadable, not PEM, or not a pair)");
    }
    return ssl;
#else
    throw std::runtime_error(
        "this llama-tp-server was built without OpenSSL: install libssl-dev and rebuild for HTTPS");
#endif
}

bool is_unix_socket(const std::string & address) {
    return address.size() > 5 && address.compare(address.size() - 5, 5, ".sock") == 0;
}

}  // namespace

Listener::Listener(const ServerOptions & o, const std::string & address, const Routes & routes)
    : http_(make_server(o)) {
    httplib::Server & http = *http_;
    const size_t n_http = o.http_threads > 0 ? (size_t) o.http_threads : (size_t) o.n_parallel + 8;
    // A connection holds its thread while its client sends the request, however
    // slowly: by default room for many such before /health and real requests
    // wait; --threads-http N caps the pool at 4N as asked. Threads start only
    // when needed and end after 3 idle seconds.
    const size_t max_http = o.http_threads > 0 ? n_http * 4 : std::max(n_http * 4, kMaxHttpThreads);
    http.new_task_queue = [n_http, max_http, this] {
        auto * q = new HttpTaskQueue(n_http, max_http);
        queue_ = q;
        return q;
    };
    // While connections wait for an HTTP thread, kept-alive clients make way.
    http.set_post_routing_handler([this](const httplib::Request &, httplib::Response & res) {
        const HttpTaskQueue * q = queue_.load();
        if (q != nullptr && q->waiting() > 0) {
            res.headers.erase("Keep-Alive");
            res.set_header("Connection", "close");
        }
    });
    // SO_REUSEADDR; SO_REUSEPORT only when asked (--reuse-port): httplib's
    // default sets it, which would let a second server silently share a port
    // already in use.
    http.set_socket_options([reuse_port = o.reuse_port, tcp = !is_unix_socket(address)](socket_t sock) {
        int one = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (reuse_port) setsockopt(sock, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
#ifdef TCP_DEFER_ACCEPT
        // A connection is handed over (and takes an HTTP thread) once its
        // client sends something: silent connections wait in the kernel, not
        // in the thread pool, for up to this long.
        int defer_s = kSilentConnectionS;
        if (tcp) setsockopt(sock, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof(defer_s));
#else
        (void) tcp;
#endif
    });
    if (!o.static_path.empty() && !http.set_mount_point(o.api_prefix + "/", o.static_path)) {
        throw std::runtime_error("--path: '" + o.static_path + "' is not a folder");
    }
    http.set_read_timeout(o.timeout_s, 0);
    http.set_write_timeout(o.timeout_s, 0);
    http.set_payload_max_length(o.max_body_size);
    routes(http);

    const std::string scheme = o.ssl_key_file.empty() ? "http" : "https";
    if (is_unix_socket(address)) {
        http.set_address_family(AF_UNIX);
        if (!http.bind_to_port(address, 8080)) throw std::runtime_error("cannot listen on the UNIX socket " + address);
        url_ = "unix:" + address;
        return;
    }
    port_ = o.port;
    if (port_ == 0) {
        port_ = http.bind_to_any_port(address);
    } else if (!http.bind_to_port(address, port_)) {
        port_ = -1;
    }
    if (port_ <= 0) {
        throw std::runtime_error("cannot listen on " + address + ":" + std::to_string(o.port) +
                                 " (address in use or not available)");
    }
    url_ = scheme + "://" + address + ":" + std::to_string(port_);
}

Listener::~Listener() {
    stop();
}

void Listener::start(std::function<void()> on_stopped) {
    thread_ = std::thread([this, on_stopped = std::move(on_stopped)] {
        http_->listen_after_bind();
        on_stopped();
    });
}

void Listener::stop() {
    if (http_) http_->stop();
    if (thread_.joinable()) thread_.join();
}

}  // namespace llama_tp::server
