#include "server/chat/template_probe.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace llama_tp::server {

namespace {

// The child's end: it dies with its parent, holds none of its sockets or
// devices, takes signals the parent blocks, runs no handler of the parent's,
// writes no output or core file, and runs no destructor of the parent's
// objects.
[[noreturn]] void run_child(const std::function<void()> & render, pid_t parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE, SIGINT, SIGTERM}) std::signal(sig, SIG_DFL);
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    close_range(3, ~0U, 0);
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
    }
    try {
        render();
    } catch (...) {
        _exit(1);
    }
    _exit(0);
}

}  // namespace

bool template_may_recurse(const std::string & source) {
    return source.find("macro") != std::string::npos || source.find("recursive") != std::string::npos;
}

void probe_render_in_child(const std::function<void()> & render, const std::string & origin) {
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return;  // no child to spare: render as before
    if (pid == 0) run_child(render, parent);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kTemplateProbeSeconds);
    int status = 0;
    for (;;) {
        const pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid) break;
        if (done < 0 && errno != EINTR) return;
        if (std::chrono::steady_clock::now() >= deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            throw std::runtime_error("chat template (" + origin +
                                     ") did not finish rendering a short conversation in " +
                                     std::to_string(kTemplateProbeSeconds) + " s");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (WIFSIGNALED(status)) {
        throw std::runtime_error("chat template (" + origin + ") crashes its engine (" + strsignal(WTERMSIG(status)) +
                                 ") rendering a short conversation: a macro or loop that recurses without end?");
    }
}

}  // namespace llama_tp::server
