#pragma once
// One address the server answers on (--host takes several, comma-separated):
// an HTTP or HTTPS server with its own pool of HTTP threads and the routes,
// bound before the model loads so that /health answers while it does. An
// address ending in .sock is a UNIX socket, as llama-server reads it.

#include "server/http/http_task_queue.h"
#include "server/server_options.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace llama_tp::server {

class Listener {
  public:
    using Routes = std::function<void(httplib::Server &)>;
    // Throws std::runtime_error saying why the address cannot be served.
    // routes: installs the handlers (the model's, or the router's).
    Listener(const ServerOptions & options, const std::string & address, const Routes & routes);
    ~Listener();
    Listener(const Listener &) = delete;
    Listener & operator=(const Listener &) = delete;

    // Serves on a thread of its own; on_stopped runs there when serving ends.
    void start(std::function<void()> on_stopped);
    // Stops serving and joins the thread.
    void stop();

    // "http://127.0.0.1:8080", "https://...", or "unix:/path.sock".
    const std::string & url() const { return url_; }
    int port() const { return port_; }

  private:
    std::unique_ptr<httplib::Server> http_;
    // httplib owns (and deletes) the queue; the pointer is only read while it serves.
    std::atomic<HttpTaskQueue *> queue_{nullptr};
    std::thread thread_;
    std::string url_;
    int port_ = 0;
};

}  // namespace llama_tp::server
