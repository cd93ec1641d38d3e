#pragma once
// Which llama-tp-server this is, in the forms clients see: llama-server's
// system_fingerprint and /props build_info ("b<build>-<commit>"), and the
// --version text.

#include <string>

namespace llama_tp::server {

// "b<commits in the history>-<short commit>", as llama-server's
// llama_build_info() (b0-unknown outside a git checkout).
std::string build_fingerprint();
// The --version lines: this build, and the llama.cpp it is built on.
std::string version_text();

}  // namespace llama_tp::server
