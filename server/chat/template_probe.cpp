#include "server/chat/template_probe.h"

#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace llama_tp::server {

namespace {

bool is_name_char(char c) {
    return std::isalnum((unsigned char) c) || c == '_';
}

bool is_space(char c) {
    return std::isspace((unsigned char) c);
}

// A macro's definition: its name, where it is, and where its body ends.
struct MacroDefinition {
    std::string name;
    size_t at, end;
};

// Every `{% macro NAME(` with the text up to the next `endmacro`, in order.
std::vector<MacroDefinition> macro_definitions(const std::string & s) {
    std::vector<MacroDefinition> defs;
    for (size_t tag = s.find("{%"); tag != std::string::npos; tag = s.find("{%", tag + 2)) {
        size_t at = tag + 2;
        while (at < s.size() && (s[at] == '-' || s[at] == '+' || is_space(s[at]))) ++at;
        if (s.compare(at, 5, "macro") != 0 || (at + 5 < s.size() && is_name_char(s[at + 5]))) continue;
        at += 5;
        while (at < s.size() && is_space(s[at])) ++at;
        size_t end_name = at;
        while (end_name < s.size() && is_name_char(s[end_name])) ++end_name;
        if (end_name == at) continue;
        const size_t end = s.find("endmacro", end_name);
        defs.push_back({s.substr(at, end_name - at), at, end == std::string::npos ? s.size() : end});
    }
    return defs;
}

// Whether the calls between n macros (caller, callee) hold a cycle: what is
// left after taking away, again and again, the macros nothing left calls.
bool has_cycle(size_t n, const std::vector<std::pair<size_t, size_t>> & calls) {
    std::vector<size_t> callers(n, 0);
    std::vector<std::vector<size_t>> callees(n);
    for (const auto & [from, to] : calls) {
        callees[from].push_back(to);
        ++callers[to];
    }
    std::vector<size_t> uncalled;
    for (size_t i = 0; i < n; ++i)
        if (callers[i] == 0) uncalled.push_back(i);
    size_t taken = 0;
    while (!uncalled.empty()) {
        const size_t m = uncalled.back();
        uncalled.pop_back();
        ++taken;
        for (size_t to : callees[m])
            if (--callers[to] == 0) uncalled.push_back(to);
    }
    return taken < n;
}

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

bool template_calls_itself(const std::string & source) {
    if (source.find("recursive") != std::string::npos || source.find("caller") != std::string::npos) return true;
    const std::vector<MacroDefinition> defs = macro_definitions(source);
    std::map<std::string, size_t> index;
    for (const MacroDefinition & d : defs) index.emplace(d.name, index.size());
    // One pass over the identifiers: a macro's name is its definition's, a
    // call (`NAME(`) inside some macro's body or outside any, or it escapes.
    std::vector<std::pair<size_t, size_t>> calls;
    size_t def = 0;  // the last definition at or before the identifier
    for (size_t at = 0; at < source.size();) {
        if (!is_name_char(source[at])) {
            ++at;
            continue;
        }
        size_t end = at;
        while (end < source.size() && is_name_char(source[end])) ++end;
        while (def + 1 < defs.size() && defs[def + 1].at <= at) ++def;
        const auto macro = index.find(source.substr(at, end - at));
        if (macro != index.end() && defs[def].at != at) {
            size_t next = end;
            while (next < source.size() && is_space(source[next])) ++next;
            if (next >= source.size() || source[next] != '(') return true;  // passed on or renamed
            if (defs[def].at <= at && at < defs[def].end) calls.emplace_back(index.at(defs[def].name), macro->second);
        }
        at = end;
    }
    return has_cycle(index.size(), calls);
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
