#pragma once
// Minimal thread-safe logging to stderr: one line per call, with a timestamp.

namespace llama_tp::server {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
void log_line(LogLevel level, const char * fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace llama_tp::server

#define SRV_DBG(...) ::llama_tp::server::log_line(::llama_tp::server::LogLevel::Debug, __VA_ARGS__)
#define SRV_INF(...) ::llama_tp::server::log_line(::llama_tp::server::LogLevel::Info, __VA_ARGS__)
#define SRV_WRN(...) ::llama_tp::server::log_line(::llama_tp::server::LogLevel::Warn, __VA_ARGS__)
#define SRV_ERR(...) ::llama_tp::server::log_line(::llama_tp::server::LogLevel::Error, __VA_ARGS__)
