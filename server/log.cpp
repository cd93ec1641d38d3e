#include "server/log.h"

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <cstring>
#include <mutex>
#include <stdexcept>

namespace llama_tp::server {

namespace {
std::atomic<int> g_level{(int) LogLevel::Info};
std::mutex g_mutex;
LogOptions g_options;          // under g_mutex
std::FILE * g_file = nullptr;  // under g_mutex; --log-file
}  // namespace

void configure_log(const LogOptions & options) {
    std::FILE * file = nullptr;
    if (!options.file.empty()) {
        file = std::fopen(options.file.c_str(), "a");
        if (file == nullptr) throw std::runtime_error("--log-file: cannot open '" + options.file + "' for writing");
    }
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_file != nullptr) std::fclose(g_file);
    g_file = file;
    g_options = options;
}

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
    char head[48] = "";
    if (g_options.timestamps) std::snprintf(head, sizeof head, "%s.%03d ", ts, ms);
    if (g_options.prefix)
        std::snprintf(head + std::strlen(head), sizeof head - std::strlen(head), "%c ", tags[(int) level]);
    for (std::FILE * out : {g_options.disabled ? nullptr : stderr, g_file}) {
        if (out == nullptr) continue;
        std::fprintf(out, "%s%s\n", head, msg);
        std::fflush(out);
    }
}

}  // namespace llama_tp::server
