#include "server/router/model_router.h"

#include "runtime/error.h"
#include "server/api/request.h"
#include "server/http/api_error.h"
#include "server/http/http_access.h"
#include "server/log.h"

#include <cpp-httplib/httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <deque>
#include <tuple>
#include <memory>

namespace llama_tp::server {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kWatchPeriod = std::chrono::milliseconds(100);

// Routes whose body's "model" picks the child, and those that take ?model=.
const char * const kBodyRoutes[] = {"/completion",
                                    "/completions",
                                    "/v1/completions",
                                    "/chat/completions",
                                    "/v1/chat/completions",
                                    "/chat/completions/input_tokens",
                                    "/v1/chat/completions/input_tokens",
                                    "/v1/chat/completions/control",
                                    "/responses",
                                    "/v1/responses",
                                    "/responses/input_tokens",
                                    "/v1/responses/input_tokens",
                                    "/v1/messages",
                                    "/v1/messages/count_tokens",
                                    "/infill",
                                    "/embedding",
                                    "/embeddings",
                                    "/v1/embeddings",
                                    "/rerank",
                                    "/reranking",
                                    "/v1/rerank",
                                    "/v1/reranking",
                                    "/tokenize",
                                    "/detokenize",
                                    "/apply-template",
                                    "/props",
                                    "/lora-adapters",
                                    "/slots/:id_slot"};
const char * const kQueryRoutes[] = {"/metrics", "/lora-adapters", "/slots"};

// The router's own flags, which its children do not get (true: takes a
// value): where it listens, its key and certificate, its log, its models.
const std::pair<const char *, bool> kRouterOnly[] = {{"-m", true},
                                                     {"--model", true},
                                                     {"-hf", true},
                                                     {"--hf-repo", true},
                                                     {"--models-dir", true},
                                                     {"--models-preset", true},
                                                     {"--models-max", true},
                                                     {"--models-autoload", false},
                                                     {"--no-models-autoload", false},
                                                     {"--host", true},
                                                     {"--port", true},
                                                     {"--api-key", true},
                                                     {"--api-key-file", true},
                                                     {"-a", true},
                                                     {"--alias", true},
                                                     {"--ssl-key-file", true},
                                                     {"--ssl-cert-file", true},
                                                     {"--log-file", true}};

// A port no one listens on now (the child binds it moments later).
int free_loopback_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw ApiError(500, "no socket for a model's port");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0;
    ::close(fd);
    if (!ok) throw ApiError(500, "no free port on loopback for a model");
    return ntohs(a.sin_port);
}

std::string lower(const std::string & s) {
    std::string out;
    for (char c : s) out += (char) std::tolower((unsigned char) c);
    return out;
}

bool hop_by_hop(const std::string & name) {
    static const char * const kDropped[] = {"host",       "content-length", "transfer-encoding",
                                            "connection", "keep-alive",     "accept-encoding",
                                            "server",     "expect",         "te",
                                            "upgrade"};
    const std::string l = lower(name);
    for (const char * d : kDropped) {
        if (l == d) return true;
    }
    return l.rfind("access-control-", 0) == 0 || l.rfind("proxy-", 0) == 0;
}

// Copies a child's output to stderr line by line, each after a prefix, until
// the child closes it (exits); owns fd.
void copy_log(int fd, std::string prefix) {
    std::string pending;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        pending.append(buf, (size_t) n);
        size_t start = 0;
        for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
            const std::string line = prefix + pending.substr(start, nl + 1 - start);
            std::fwrite(line.data(), 1, line.size(), stderr);
        }
        pending.erase(0, start);
    }
    if (!pending.empty()) {
        const std::string line = prefix + pending + "\n";
        std::fwrite(line.data(), 1, line.size(), stderr);
    }
    ::close(fd);
}

// What a forwarding thread hands the HTTP thread that answers the client.
struct ProxyStream {
    std::mutex mutex;
    std::condition_variable cv;
    bool have_headers = false;
    bool done = false;
    bool client_gone = false;
    int status = 0;
    httplib::Headers headers;
    std::deque<std::string> chunks;
    std::string error;
};

std::string model_of_body(const httplib::Request & req) {
    const json body = parse_json(req.body);
    if (!body.is_object() || !body.contains("model")) return "";
    if (!body["model"].is_string()) throw ApiError(400, "\"model\" must be a string", "model");
    return body["model"].get<std::string>();
}

}  // namespace

ModelRouter::ModelRouter(const ServerOptions & options, std::string exe)
    : opts_(options),
      exe_(std::move(exe)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()) {
    for (CatalogModel & c : load_catalog(options.models_dir, options.models_preset)) {
        Model m;
        m.entry = std::move(c);
        models_.push_back(std::move(m));
    }
    watcher_ = std::thread([this] { watch(); });
    std::unique_lock<std::mutex> lock(mutex_);
    int on_startup = 0;
    for (Model & m : models_) on_startup += m.entry.load_on_startup;
    if (options.models_max > 0 && on_startup > options.models_max) {
        lock.unlock();
        shut_down();
        watcher_.join();
        throw Error(std::to_string(on_startup) + " models are to load on startup, more than --models-max " +
                    std::to_string(options.models_max));
    }
    for (Model & m : models_) {
        if (m.entry.load_on_startup) start(lock, m);
    }
}

void ModelRouter::shut_down() {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (Model & m : models_) {
        if (m.state == State::Starting) m.state = State::Unloaded;
        if (m.state == State::Loading || m.state == State::Loaded) stop(m);
    }
    changed_.notify_all();
}

ModelRouter::~ModelRouter() {
    shut_down();
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] {
        if (forwards_ > 0) return false;
        for (const Model & m : models_) {
            if (m.state != State::Unloaded) return false;
        }
        return true;
    });
    lock.unlock();
    watcher_.join();
}

ModelRouter::Model * ModelRouter::find(const std::string & id) {
    for (Model & m : models_) {
        if (m.entry.id == id) return &m;
    }
    return nullptr;
}

// Command-line words without the router's own flags.
void append_child_words(std::vector<std::string> & out, const std::vector<std::string> & words) {
    for (size_t i = 0; i < words.size(); ++i) {
        const std::string & word = words[i];
        std::string name = word.substr(0, word.find('='));
        if (name.rfind("--", 0) == 0) std::replace(name.begin(), name.end(), '_', '-');  // --api_key
        bool dropped = false;
        for (const auto & [flag, takes_value] : kRouterOnly) {
            if (name != flag) continue;
            dropped = true;
            if (takes_value && name.size() == word.size()) ++i;  // the value is the next word
        }
        if (!dropped) out.push_back(word);
    }
}

// The model's options (its file kept), then the router's command line (whose
// flags win, as upstream's), each without the router's own flags, then
// where to listen.
std::vector<std::string> ModelRouter::child_args(const Model & m, int port) const {
    std::vector<std::string> out{exe_};
    std::vector<std::string> preset = m.entry.args;
    std::string model_flag;
    for (size_t i = 0; i + 1 < preset.size(); ++i) {
        if (preset[i] == "--model" || preset[i] == "-m" || preset[i] == "--hf-repo" || preset[i] == "-hf") {
            out.push_back(preset[i]);
            out.push_back(preset[i + 1]);
            preset.erase(preset.begin() + (long) i, preset.begin() + (long) i + 2);
            break;
        }
    }
    append_child_words(out, preset);
    append_child_words(out, opts_.arguments);
    for (const char * w : {"--host", "127.0.0.1", "--port"}) out.push_back(w);
    out.push_back(std::to_string(port));
    out.push_back("--alias");
    out.push_back(m.entry.id);
    return out;
}

// Asks the watcher to start the model, first making room under --models-max.
void ModelRouter::start(std::unique_lock<std::mutex> & lock, Model & m) {
    auto shutting_down = [this] {
        if (stopping_) throw ApiError(503, "the server is shutting down", "", "unavailable");
    };
    shutting_down();
    changed_.wait(lock, [&] { return m.state != State::Stopping || stopping_; });
    shutting_down();
    if (m.state != State::Unloaded) return;  // another request started it meanwhile
    auto running = [this] {
        int n = 0;
        for (const Model & x : models_) n += x.state != State::Unloaded;
        return n;
    };
    auto idle_victim = [this, &m]() -> Model * {
        Model * victim = nullptr;
        for (Model & x : models_) {
            if (&x != &m && x.state == State::Loaded && x.in_flight == 0 &&
                (!victim || x.last_used < victim->last_used)) {
                victim = &x;
            }
        }
        return victim;
    };
    while (opts_.models_max > 0 && running() >= opts_.models_max) {
        Model * victim = idle_victim();
        if (!victim) {
            // Every running model answers a request, or is stopping or loading: wait a while for one.
            const bool moved = changed_.wait_for(lock, std::chrono::seconds(30), [&] {
                return stopping_ || m.state != State::Unloaded || running() < opts_.models_max || idle_victim();
            });
            shutting_down();
            if (m.state != State::Unloaded) return;
            if (!moved) throw ApiError(500, "model limit reached, try again later", "", "", "server_error");
            continue;
        }
        SRV_INF("router: stopping %s to make room for %s (--models-max %d)", victim->entry.id.c_str(),
                m.entry.id.c_str(), opts_.models_max);
        stop(*victim);
        changed_.wait_for(lock, std::chrono::seconds(victim->entry.stop_timeout_s + 5),
                          [&] { return victim->state == State::Unloaded || stopping_; });
        shutting_down();
        if (m.state != State::Unloaded) return;
    }
    m.state = State::Starting;
    m.last_used = ++uses_;
    m.failed = false;
    m.exit_code = 0;
    changed_.notify_all();
}

void ModelRouter::stop(Model & m) {
    if (m.pid > 0) ::kill(m.pid, SIGTERM);
    m.state = m.pid > 0 ? State::Stopping : State::Unloaded;
    m.kill_at = Clock::now() + std::chrono::seconds(m.entry.stop_timeout_s);
    changed_.notify_all();
}

// Until the model serves or its child ends, however long its load takes,
// or the client leaves.
bool ModelRouter::wait_ready(std::unique_lock<std::mutex> & lock, Model & m, const httplib::Request & req) {
    while (!changed_.wait_for(lock, std::chrono::milliseconds(200),
                              [&] { return m.state == State::Loaded || m.state == State::Unloaded || stopping_; })) {
        if (req.is_connection_closed()) throw ApiError(499, "the client left while the model loaded");
    }
    return m.state == State::Loaded;
}

// Starts, reaps and health-checks the children; the only thread that forks,
// so that a child's parent-death signal follows the router's life.
void ModelRouter::watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        bool any = false;
        std::vector<std::thread> ended_logs;
        for (Model & m : models_) {
            if (m.state == State::Starting) {
                if (stopping_) {
                    m.state = State::Unloaded;
                    changed_.notify_all();
                } else {
                    spawn(m);
                }
            }
            if (m.pid > 0 && poll(m)) ended_logs.push_back(std::move(m.log));
            any |= m.state != State::Unloaded;
        }
        std::vector<std::tuple<Model *, pid_t, int>> loading;
        for (Model & m : models_) {
            if (m.state == State::Loading) loading.emplace_back(&m, m.pid, m.port);
        }
        lock.unlock();
        for (std::thread & t : ended_logs) {
            if (t.joinable()) t.join();  // the pipe is at its end: the child is gone
        }
        if (stopping_ && !any) return;
        std::vector<std::pair<Model *, pid_t>> ready;
        for (auto [m, pid, port] : loading) {
            httplib::Client cli("127.0.0.1", port);
            cli.set_connection_timeout(0, 200000);
            cli.set_read_timeout(1, 0);
            auto r = cli.Get(opts_.api_prefix + "/health");
            if (r && r->status == 200) ready.emplace_back(m, pid);
        }
        lock.lock();
        for (auto [m, pid] : ready) {
            if (m->state != State::Loading || m->pid != pid) continue;  // stopped (and started again) meanwhile
            m->state = State::Loaded;
            SRV_INF("router: %s ready on port %d", m->entry.id.c_str(), m->port);
            changed_.notify_all();
        }
        changed_.wait_for(lock, kWatchPeriod);
    }
}

void ModelRouter::spawn(Model & m) {
    try {
        m.port = free_loopback_port();
    } catch (const ApiError & e) {
        m.state = State::Unloaded;
        m.failed = true;
        changed_.notify_all();
        return;
    }
    const std::vector<std::string> args = child_args(m, m.port);
    std::vector<char *> argv;
    for (const std::string & a : args) argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    int out[2] = {-1, -1};
    if (::pipe2(out, O_CLOEXEC) != 0) out[0] = out[1] = -1;
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
        // Only async-signal-safe calls until exec.
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(1);
        ::setpgid(0, 0);  // a terminal's Ctrl-C is the router's to pass on
        if (out[1] >= 0) {
            ::dup2(out[1], STDOUT_FILENO);
            ::dup2(out[1], STDERR_FILENO);
        }
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        ::execv(exe_.c_str(), argv.data());
        ::_exit(127);
    }
    if (out[1] >= 0) ::close(out[1]);
    if (out[0] >= 0 && pid > 0) {
        m.log = std::thread(copy_log, out[0], "[" + m.entry.id + "] ");
    } else if (out[0] >= 0) {
        ::close(out[0]);
    }
    if (pid < 0) {
        m.state = State::Unloaded;
        m.failed = true;
    } else {
        m.pid = pid;
        m.state = State::Loading;
        SRV_INF("router: starting %s (pid %d, port %d)", m.entry.id.c_str(), (int) pid, m.port);
    }
    changed_.notify_all();
}

// Reaps a child that ended (true); a stopped one gets SIGKILL after its grace.
bool ModelRouter::poll(Model & m) {
    int status = 0;
    const pid_t r = ::waitpid(m.pid, &status, WNOHANG);
    if (r == 0) {
        if (m.state == State::Stopping && Clock::now() > m.kill_at) {
            SRV_WRN("router: %s did not stop within %d s of SIGTERM: killing it", m.entry.id.c_str(),
                    m.entry.stop_timeout_s);
            ::kill(m.pid, SIGKILL);
            m.kill_at = Clock::time_point::max();
        }
        return false;
    }
    m.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    // As upstream: a child that ended on its own with status 0 did not fail.
    m.failed = m.state != State::Stopping && m.exit_code != 0;
    if (m.failed) {
        SRV_WRN("router: %s ended with status %d", m.entry.id.c_str(), m.exit_code);
    }
    m.pid = -1;
    m.state = State::Unloaded;
    changed_.notify_all();
    return true;
}

void ModelRouter::list(httplib::Response & res) {
    std::lock_guard<std::mutex> lock(mutex_);
    json data = json::array();
    for (const Model & m : models_) {
        if (m.entry.hidden) continue;  // a cached model a preset with dedup-cache-models stands for
        const char * value = m.state == State::Unloaded                               ? "unloaded"
                             : m.state == State::Loaded || m.state == State::Stopping ? "loaded"
                                                                                      : "loading";
        json status = {{"value", value}, {"args", child_args(m, m.port)}};
        if (m.state == State::Unloaded && m.failed) {
            status["failed"] = true;
            status["exit_code"] = m.exit_code;
        }
        data.push_back({{"id", m.entry.id},
                        {"aliases", json::array()},
                        {"tags", json::array()},
                        {"object", "model"},
                        {"owned_by", "llamacpp"},
                        {"created", created_},
                        {"path", m.entry.path},
                        {"status", status}});
    }
    send_json(res, {{"object", "list"}, {"data", data}});
}

void ModelRouter::load(const httplib::Request & req, httplib::Response & res) {
    const std::string id = model_of_body(req);
    std::unique_lock<std::mutex> lock(mutex_);
    Model * m = find(id);
    if (!m) throw ApiError(404, "model is not found");
    if (m->state != State::Unloaded && m->state != State::Stopping) throw ApiError(400, "model is already running");
    start(lock, *m);
    send_json(res, {{"success", true}});
}

void ModelRouter::unload(const httplib::Request & req, httplib::Response & res) {
    const std::string id = model_of_body(req);
    std::lock_guard<std::mutex> lock(mutex_);
    Model * m = find(id);
    if (!m) throw ApiError(400, "model is not found");
    if (m->state == State::Unloaded || m->state == State::Stopping) throw ApiError(400, "model is not running");
    stop(*m);
    send_json(res, {{"success", true}});
}

void ModelRouter::props(const httplib::Request & req, httplib::Response & res) {
    if (req.has_param("model")) return route(req, res, false);
    send_json(res, {{"role", "router"},
                    {"max_instances", opts_.models_max},
                    {"models_autoload", opts_.models_autoload},
                    {"model_alias", "llama-tp-server"},
                    {"model_path", "none"},
                    {"default_generation_settings", {{"params", json::object()}, {"n_ctx", 0}}}});
}

// Finds the model a request names, starts it where that is allowed, waits
// until it serves, and forwards the request.
void ModelRouter::route(const httplib::Request & req, httplib::Response & res, bool by_body) {
    if (stopping_) throw ApiError(503, "the server is shutting down", "", "unavailable");
    const std::string id = by_body ? model_of_body(req) : req.get_param_value("model");
    if (id.empty()) throw ApiError(400, "model name is missing from the request", "model");
    bool autoload = opts_.models_autoload;
    if (req.has_param("autoload")) {
        const std::string a = req.get_param_value("autoload");
        autoload = a == "true" || a == "1";
    }
    std::unique_lock<std::mutex> lock(mutex_);
    Model * m = find(id);
    if (!m) throw ApiError(400, "model '" + id + "' not found", "model");
    if (m->state == State::Unloaded || m->state == State::Stopping) {
        if (!autoload) throw ApiError(400, "model is not loaded", "model");
        start(lock, *m);
    }
    // Counted from now: a request waiting for its model keeps it from being
    // the one stopped to make room.
    m->in_flight++;
    bool ready = false;
    try {
        ready = wait_ready(lock, *m, req);
    } catch (...) {
        m->in_flight--;
        changed_.notify_all();
        throw;
    }
    if (!ready) {
        m->in_flight--;
        changed_.notify_all();
        throw ApiError(500, "model name=" + id + " failed to load", "", "", "server_error");
    }
    if (req.method == "POST") m->last_used = ++uses_;
    forwards_++;
    const int port = m->port;
    lock.unlock();
    forward(req, res, *m, port);
}

// The request to the child on a thread of its own, whose answer the
// client's connection streams as it arrives; a client that leaves ends it.
void ModelRouter::forward(const httplib::Request & req, httplib::Response & res, Model & m, int port) {
    auto stream = std::make_shared<ProxyStream>();
    httplib::Request up;
    up.method = req.method;
    up.path = req.target.empty() ? req.path : req.target;
    for (const auto & [name, value] : req.headers) {
        if (!hop_by_hop(name)) up.headers.emplace(name, value);
    }
    up.body = req.body;
    up.response_handler = [stream](const httplib::Response & r) {
        std::lock_guard<std::mutex> lock(stream->mutex);
        stream->status = r.status;
        stream->headers = r.headers;
        stream->have_headers = true;
        stream->cv.notify_all();
        return !stream->client_gone;
    };
    up.content_receiver = [stream](const char * data, size_t n, size_t, size_t) {
        std::lock_guard<std::mutex> lock(stream->mutex);
        if (stream->client_gone) return false;
        stream->chunks.emplace_back(data, n);
        stream->cv.notify_all();
        return true;
    };
    const int timeout_s = opts_.timeout_s;
    std::thread([this, stream, up = std::move(up), port, timeout_s, &m] {
        {
            httplib::Client cli("127.0.0.1", port);
            cli.set_connection_timeout(5, 0);
            cli.set_read_timeout(timeout_s, 0);
            cli.set_write_timeout(timeout_s, 0);
            const httplib::Result r = cli.send(up);
            {
                std::lock_guard<std::mutex> lock(mutex_);
                m.in_flight--;  // before the client hears the end: its next request may find it idle
                changed_.notify_all();
            }
            std::lock_guard<std::mutex> lock(stream->mutex);
            if (r && !stream->have_headers) {  // an answer without a body (204)
                stream->status = r->status;
                stream->headers = r->headers;
                stream->have_headers = true;
            }
            if (!r && !stream->client_gone) stream->error = httplib::to_string(r.error());
            stream->done = true;
            stream->cv.notify_all();
        }
        std::lock_guard<std::mutex> lock(mutex_);
        forwards_--;
        changed_.notify_all();
    }).detach();

    std::unique_lock<std::mutex> lock(stream->mutex);
    while (!stream->cv.wait_for(lock, std::chrono::milliseconds(200),
                                [&] { return stream->have_headers || stream->done; })) {
        if (req.is_connection_closed()) {  // nobody waits for the answer any more
            stream->client_gone = true;
            return;
        }
    }
    if (!stream->have_headers) {
        const std::string error = stream->error;
        lock.unlock();
        throw ApiError(500, "proxy error: " + error, "", "", "server_error");
    }
    res.status = stream->status;
    std::string content_type = "application/json";
    for (const auto & [name, value] : stream->headers) {
        if (lower(name) == "content-type") {
            content_type = value;
        } else if (!hop_by_hop(name)) {
            res.set_header(name, value);
        }
    }
    if (res.status >= 400) {
        // An error object whole, as the child wrote it.
        stream->cv.wait(lock, [&] { return stream->done; });
        std::string body;
        for (const std::string & c : stream->chunks) body += c;
        lock.unlock();
        res.set_content(body, content_type);
        return;
    }
    lock.unlock();
    res.set_chunked_content_provider(
        content_type,
        [stream](size_t, httplib::DataSink & sink) {
            std::unique_lock<std::mutex> lock(stream->mutex);
            while (!stream->cv.wait_for(lock, std::chrono::milliseconds(200),
                                        [&] { return !stream->chunks.empty() || stream->done; })) {
                if (!sink.is_writable()) return false;  // the client left
            }
            if (!stream->chunks.empty()) {
                std::string chunk = std::move(stream->chunks.front());
                stream->chunks.pop_front();
                lock.unlock();
                return sink.write(chunk.data(), chunk.size());
            }
            // A child that died mid-answer ends the client's connection, not its body.
            if (!stream->error.empty()) return false;
            lock.unlock();
            sink.done();
            return true;
        },
        [stream](bool) {
            std::lock_guard<std::mutex> lock(stream->mutex);
            stream->client_gone = true;
            stream->cv.notify_all();
        });
}

void ModelRouter::register_routes(httplib::Server & http) {
    const std::string prefix = opts_.api_prefix;
    auto at = [&prefix](const char * path) { return prefix + path; };
    http.set_pre_routing_handler([this](const httplib::Request & req, httplib::Response & res) {
        if (admit(opts_, req, res) == Admission::Answered) return httplib::Server::HandlerResponse::Handled;
        return httplib::Server::HandlerResponse::Unhandled;
    });
    install_error_handlers(http);
    auto health = [](const httplib::Request &, httplib::Response & res) { send_json(res, {{"status", "ok"}}); };
    http.Get(at("/health"), health);
    http.Get(at("/v1/health"), health);
    auto models = guarded([this](const httplib::Request &, httplib::Response & res) { list(res); });
    http.Get(at("/models"), models);
    http.Get(at("/v1/models"), models);
    http.Post(at("/models/load"), guarded([this](const httplib::Request & q, httplib::Response & r) { load(q, r); }));
    http.Post(at("/models/unload"),
              guarded([this](const httplib::Request & q, httplib::Response & r) { unload(q, r); }));
    http.Get(at("/props"), guarded([this](const httplib::Request & q, httplib::Response & r) { props(q, r); }));
    for (const char * path : kBodyRoutes) {
        http.Post(at(path), guarded([this](const httplib::Request & q, httplib::Response & r) { route(q, r, true); }));
    }
    for (const char * path : kQueryRoutes) {
        http.Get(at(path), guarded([this](const httplib::Request & q, httplib::Response & r) { route(q, r, false); }));
    }
    install_disabled_features(http, prefix);
}

}  // namespace llama_tp::server
