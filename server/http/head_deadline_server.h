#pragma once
// The plain-HTTP server, whose connections must send each request's line
// and headers within a deadline from its first byte. A connection holds an
// HTTP thread while its client sends the request, and cpp-httplib bounds
// only the wait for each read, so a client sending a byte a second would
// hold its thread for hours; enough of them would leave no thread for
// /health. This server runs its connections itself (the keep-alive loop
// and a socket stream of its own) and closes one whose request head is
// late. The body and the response keep --timeout per read and write.

#include <cpp-httplib/httplib.h>

namespace llama_tp::server {

class HeadDeadlineServer final : public httplib::Server {
  public:
    explicit HeadDeadlineServer(int head_deadline_s) : head_deadline_s_(head_deadline_s) {}

  private:
    bool process_and_close_socket(socket_t sock) override;

    const int head_deadline_s_;
};

}  // namespace llama_tp::server
