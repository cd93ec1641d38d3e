#include "server/chat/template_sandbox.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char ** environ;

namespace llama_tp::server {

namespace {

bool write_all(int fd, const char * p, size_t n) {
    while (n > 0) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t) w;
    }
    return true;
}

bool read_all(int fd, char * p, size_t n) {
    while (n > 0) {
        const ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r;
        n -= (size_t) r;
    }
    return true;
}

}  // namespace

bool write_frame(int fd, const std::string & bytes) {
    const uint32_t n = (uint32_t) bytes.size();
    return write_all(fd, reinterpret_cast<const char *>(&n), sizeof(n)) && write_all(fd, bytes.data(), bytes.size());
}

bool read_frame(int fd, std::string & bytes) {
    uint32_t n = 0;
    if (!read_all(fd, reinterpret_cast<char *>(&n), sizeof(n))) return false;
    bytes.resize(n);
    return read_all(fd, bytes.data(), n);
}

TemplateSandbox::TemplateSandbox(std::string config, std::string origin, int seconds)
    : config_(std::move(config)), origin_(std::move(origin)), seconds_(seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    start();
}

TemplateSandbox::~TemplateSandbox() {
    stop();
}

void TemplateSandbox::start() {
    int in[2], out[2];  // the renderer's stdin and stdout
    if (pipe2(in, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "chat template renderer");
    if (pipe2(out, O_CLOEXEC) != 0) {
        const int error = errno;
        close(in[0]);
        close(in[1]);
        throw std::system_error(error, std::generic_category(), "chat template renderer");
    }
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_adddup2(&files, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&files, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&files, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    // Signals as a new process has them (the server blocks some in every thread).
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char self[] = "/proc/self/exe", name[] = "llama-tp-template-renderer";  // its name in ps
    char argument[64];
    std::snprintf(argument, sizeof(argument), "%s", kTemplateRendererArgument);
    char * argv[] = {name, argument, nullptr};
    const int rc = posix_spawn(&pid_, self, &files, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&files);
    posix_spawnattr_destroy(&attr);
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
    if (rc != 0) {
        pid_ = -1;
        stop();
        throw std::system_error(rc, std::generic_category(), "chat template renderer (" + origin_ + ") does not start");
    }
    exchange(config_, "its templates");
}

void TemplateSandbox::stop() {
    if (to_ >= 0) close(to_);
    if (from_ >= 0) close(from_);
    to_ = from_ = -1;
    if (pid_ > 0) {
        kill(pid_, SIGKILL);
        while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
        }
    }
    pid_ = -1;
}

void TemplateSandbox::exchange(const std::string & frame, const std::string & what) {
    char done = 0;
    bool answered = write_frame(to_, frame);
    if (answered) {
        pollfd fd{from_, POLLIN, 0};
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds_);
        int ready = 0;
        do {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            ready = left.count() > 0 ? poll(&fd, 1, (int) left.count()) : 0;
        } while (ready < 0 && errno == EINTR);
        if (ready == 0) {
            stop();
            throw std::runtime_error("chat template (" + origin_ + ") did not finish rendering " + what + " in " +
                                     std::to_string(seconds_) + " s");
        }
        answered = ready > 0 && read_all(from_, &done, 1);
    }
    if (answered) return;
    // The renderer is gone: how it went says why.
    close(to_);
    close(from_);
    to_ = from_ = -1;
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    if (WIFSIGNALED(status)) {
        throw std::runtime_error("chat template (" + origin_ + ") crashes its engine (" + strsignal(WTERMSIG(status)) +
                                 ") rendering " + what + ": a macro or loop that recurses without end?");
    }
    throw std::runtime_error("chat template renderer (" + origin_ + ") stopped rendering " + what + " (exit status " +
                             std::to_string(WEXITSTATUS(status)) + ")");
}

void TemplateSandbox::render(const std::string & request) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pid_ < 0) start();
    exchange(request, "these messages");
}

}  // namespace llama_tp::server
