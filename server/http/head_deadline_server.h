#pragma once
// The HTTP and HTTPS servers, whose connections must send each request's
// line and headers within a deadline from its first byte. A connection holds
// an HTTP thread while its client sends the request, and cpp-httplib bounds
// only the wait for each read, so a client sending a byte a second would
// hold its thread for hours; enough of them would leave no thread for
// /health. These servers run their connections themselves (the keep-alive
// loop, the TLS handshake and a socket stream of their own) and close one
// whose handshake or request head is late. The body and the response keep
// --timeout per read and write.

#include <cpp-httplib/httplib.h>

#include <utility>

namespace llama_tp::server {

// Base: httplib::Server, or httplib::SSLServer for HTTPS.
template <class Base>
class HeadDeadlineServerOf final : public Base {
  public:
    template <class... BaseArgs>
    explicit HeadDeadlineServerOf(int head_deadline_s, BaseArgs &&... base_args)
        : Base(std::forward<BaseArgs>(base_args)...), head_deadline_s_(head_deadline_s) {}

  private:
    bool process_and_close_socket(socket_t sock) override;

    const int head_deadline_s_;
};

using HeadDeadlineServer = HeadDeadlineServerOf<httplib::Server>;
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
using HeadDeadlineTlsServer = HeadDeadlineServerOf<httplib::SSLServer>;
#endif

}  // namespace llama_tp::server
