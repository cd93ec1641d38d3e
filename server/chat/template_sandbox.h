#pragma once
// A chat template whose macros can reach themselves (template_probe.h) may
// end for the conversations tried at start and recurse for ever on another,
// overflowing the stack of whatever renders it. Each request's conversation
// is therefore rendered first by a renderer process of its own: this
// executable started again with kTemplateRendererArgument, holding nothing
// but the templates. When it dies the request is refused and the next one
// starts another; the server renders only what the renderer finished.
// (A fork of the server would copy its page tables on every request, ~20 ms
// for a 1.3 GB model, and a child kept from a fork would hold the server's
// memory copy-on-write.)

#include <mutex>
#include <string>

#include <sys/types.h>

namespace llama_tp::server {

// argv[1] of the renderer process (main runs run_chat_template_renderer,
// chat_format.h).
constexpr const char * kTemplateRendererArgument = "--internal-template-renderer";

// Messages between the two: a 4-byte length, then that many bytes.
bool write_frame(int fd, const std::string & bytes);
bool read_frame(int fd, std::string & bytes);

class TemplateSandbox {
  public:
    // Starts the renderer and hands it `config` (its first frame); throws
    // std::system_error when no process or pipe can be had, and
    // std::runtime_error naming `origin` when it dies on the config.
    TemplateSandbox(std::string config, std::string origin, int seconds);
    ~TemplateSandbox();
    TemplateSandbox(const TemplateSandbox &) = delete;
    TemplateSandbox & operator=(const TemplateSandbox &) = delete;

    // Has the renderer render `request`; throws std::runtime_error when it
    // dies doing so or takes longer than the deadline (it is then stopped,
    // and the next call starts another; std::system_error where it cannot).
    void render(const std::string & request);

  private:
    void start();
    void stop();
    // Sends a frame and waits for the renderer's one byte back.
    void exchange(const std::string & frame, const std::string & what);

    const std::string config_, origin_;
    const int seconds_;
    std::mutex mutex_;  // one conversation at a time through the pipes
    pid_t pid_ = -1;
    int to_ = -1, from_ = -1;  // the renderer's stdin and stdout
};

}  // namespace llama_tp::server
