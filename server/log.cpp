#include "server/log.h"

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace llama_tp::server {

namespace {
std::atomic<int> g_level{(int) LogLevel::Info};
std::mutex g_mutex;
}  // namespace

void set_log_level(LogLevel level) {
    g_level = (int) level;
}

bool log_enabled(LogLevel level) {
    return (int) level >= g_level.load();
}

void log_line(LogLevel level, const char * fmt, ...) {
    if (!log_enabled(level)) {
        return;
    }
    char msg[4096];
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, sizeof(msg), fmt, args);
    va_end(args);

    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    const int ms = (int) (std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
    std::tm tm{};
    localtime_r(&t, &tm);
    char ts[32];
    std::strftime(ts, sizeof(ts), "%H:%M:%S", &tm);

    static const char tags[] = {'D', 'I', 'W', 'E'};
    std::lock_guard<std::mutex> lock(g_mutex);
    std::fprintf(stderr, "%s.%03d %c %s\n", ts, ms, tags[(int) level], msg);
    std::fflush(stderr);
}

}  // namespace llama_tp::server
