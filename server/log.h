#pragma once
// Minimal thread-safe logging to stderr (and a file with --log-file): one
// line per call, with a timestamp and the level's letter unless turned off.

#include <string>

namespace llama_tp::server {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

struct LogOptions {
    bool disabled = false;  // --log-disable
    std::string file;       // --log-file: every line there too
    bool timestamps = true;
    bool prefix = true;  // the level's letter
};

// Throws std::runtime_error naming the file when it cannot be opened.
void configure_log(const LogOptions & options);
void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
void log_line(LogLevel level, const char * fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace llama_tp::server

#define SRV_DBG(...) ::llama_tp::server::log_line(::llama_tp::server::LogLevel::Debug, __VA_ARGS__)
#define SRV_INF(...) ::llama_tp::server::log_line(::llama_tp::server::LogLevel::Info, __VA_ARGS__)
#define SRV_WRN(...) ::llama_tp::server::log_line(::llama_tp::server::LogLevel::Warn, __VA_ARGS__)
#define SRV_ERR(...) ::llama_tp::server::log_line(::llama_tp::server::LogLevel::Error, __VA_ARGS__)
