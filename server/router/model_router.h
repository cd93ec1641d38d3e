#pragma once
// llama-server's router mode: no model of its own, but the models of
// --models-dir, each served by a llama-tp-server child process (its own
// ranks, the router's flags) that starts on demand: POST /models/load, or a
// request naming the model while --models-autoload is on. At most
// --models-max run at once; a load beyond that stops the least recently
// used idle one. Requests go to the child their "model" field names (GET
// routes: ?model=), and the answers stream back as the child writes them.
// GET /models lists every model with its status.
//
// Children are started and reaped by one thread of the router, listen on
// loopback without an API key (the router checks it), and end with it:
// they get SIGTERM when it stops or dies. Their log lines go to the
// router's stderr, each after the model's name in brackets.

#include "server/router/model_catalog.h"
#include "server/server_options.h"

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace llama_tp::server {

class ModelRouter {
  public:
    // exe: the llama-tp-server binary the children run. Throws
    // llama_tp::Error when --models-dir cannot be read.
    ModelRouter(const ServerOptions & options, std::string exe);
    ~ModelRouter();  // stops every child and waits for it
    ModelRouter(const ModelRouter &) = delete;
    ModelRouter & operator=(const ModelRouter &) = delete;

    void register_routes(httplib::Server & http);
    // Stops every child (SIGTERM), so that requests forwarded to them end;
    // new requests get errors. The destructor then waits for them.
    void shut_down();
    size_t n_models() const { return models_.size(); }

  private:
    enum class State { Unloaded, Starting, Loading, Loaded, Stopping };
    struct Model {
        CatalogModel entry;
        State state = State::Unloaded;
        pid_t pid = -1;
        int port = 0;
        int exit_code = 0;
        bool failed = false;  // the last child ended on its own with a nonzero status
        int in_flight = 0;    // requests being forwarded to it
        uint64_t last_used = 0;
        std::chrono::steady_clock::time_point kill_at;
        std::thread log;  // copies the child's output to stderr, each line after "[id] "
    };

    Model * find(const std::string & id);
    std::vector<std::string> child_args(const Model & m, int port) const;
    void start(std::unique_lock<std::mutex> & lock, Model & m);
    void stop(Model & m);
    bool wait_ready(std::unique_lock<std::mutex> & lock, Model & m, const httplib::Request & req);
    void watch();
    void spawn(Model & m);
    bool poll(Model & m);

    void list(httplib::Response & res);
    void load(const httplib::Request & req, httplib::Response & res);
    void unload(const httplib::Request & req, httplib::Response & res);
    void props(const httplib::Request & req, httplib::Response & res);
    void route(const httplib::Request & req, httplib::Response & res, bool by_body);
    void forward(const httplib::Request & req, httplib::Response & res, Model & m, int port);

    const ServerOptions & opts_;
    const std::string exe_;
    std::vector<Model> models_;
    const int64_t created_;
    uint64_t uses_ = 0;  // a clock of requests, for the least recently used model

    std::mutex mutex_;
    std::condition_variable changed_;  // a model's state changed, or a forward ended
    std::atomic<bool> stopping_{false};
    int forwards_ = 0;  // forwarding threads still running
    std::thread watcher_;
};

}  // namespace llama_tp::server
