#include "server/model_source.h"

#include "arg.h"
#include "common.h"
#include "download.h"
#include "runtime/error.h"
#include "server/log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace llama_tp::server {

namespace {

// SIGINT and SIGTERM are blocked until the server runs: a pending one asks
// a download (or the wait for one) to stop.
struct DownloadCancel {
    bool requested() const {
        sigset_t pending;
        sigemptyset(&pending);
        sigpending(&pending);
        return sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1;
    }
};

// A URL as logged: without credentials or query (signed URLs carry tokens there).
std::string shown_url(const std::string & url) {
    std::string u = url.substr(0, url.find('?'));
    const size_t scheme = u.find("://");
    const size_t at = u.find('@', scheme == std::string::npos ? 0 : scheme + 3);
    const size_t slash = u.find('/', scheme == std::string::npos ? 0 : scheme + 3);
    if (scheme != std::string::npos && at != std::string::npos && (slash == std::string::npos || at < slash)) {
        u.erase(scheme + 3, at + 1 - (scheme + 3));
    }
    return u;
}

// Processes of one host fetching the same model take turns: the first
// downloads, the next finds the file. The wait polls, so that SIGINT and
// SIGTERM (blocked until the server runs) still end it. A cache the process
// cannot write (read-only, --offline) is used without a lock.
class CacheLock {
  public:
    CacheLock(const std::string & directory, const std::string & what, const DownloadCancel & cancel) {
        std::error_code ec;
        std::filesystem::create_directories(directory, ec);
        char name[64];
        std::snprintf(name, sizeof name, "llama-tp-fetch-%016llx.lock",
                      (unsigned long long) std::hash<std::string>{}(what));
        fd_ = ::open((std::filesystem::path(directory) / name).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd_ < 0) return;
        bool told = false;
        while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
            if (errno != EWOULDBLOCK && errno != EINTR) return;
            if (cancel.requested()) throw DownloadInterrupted(what + ": interrupted while waiting for another process");
            if (!told) SRV_INF("model: waiting for another process fetching %s", what.c_str());
            told = true;
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
    ~CacheLock() {
        if (fd_ >= 0) ::close(fd_);  // closing releases the lock
    }
    CacheLock(const CacheLock &) = delete;
    CacheLock & operator=(const CacheLock &) = delete;

  private:
    int fd_ = -1;
};

// Progress as log lines (every tenth of a file), not a terminal bar: the
// server's log goes to files and journals.
class DownloadLog : public common_download_callback {
  public:
    void on_start(const common_download_progress & p) override {
        if (!p.cached) SRV_INF("model: downloading %s", shown_url(p.url).c_str());
    }
    void on_update(const common_download_progress & p) override {
        if (p.total < kShownFrom) return;
        const int tenth = (int) (10 * p.downloaded / p.total);
        std::lock_guard<std::mutex> lock(mutex_);
        int & shown = shown_[p.url];
        if (tenth <= shown) return;
        shown = tenth;
        SRV_INF("model: %3d%% of %s (%.1f MiB)", 10 * tenth, file_name(p.url).c_str(), p.total / 1048576.0);
    }
    void on_done(const common_download_progress & p, bool ok) override {
        if (!ok) SRV_ERR("model: download of %s failed", shown_url(p.url).c_str());
    }
    bool is_cancelled() const override { return cancel_.requested(); }

  private:
    static constexpr size_t kShownFrom = 64u << 20;  // smaller files arrive before a line would help
    static std::string file_name(const std::string & url) {
        const std::string path = url.substr(0, url.find('?'));
        return path.substr(path.rfind('/') + 1);
    }
    DownloadCancel cancel_;
    std::mutex mutex_;
    std::map<std::string, int> shown_;
};

common_params download_params(const ModelSource & s) {
    common_params p;
    p.model.hf_repo = s.hf_repo;
    p.model.hf_file = s.hf_file;
    p.model.url = s.url;
    p.model.docker_repo = s.docker_repo;
    p.model.path = s.path;
    p.hf_token = s.hf_token;
    p.offline = s.offline;
    p.no_mmproj = true;  // llama-tp-server has no multimodal projector to use it
    return p;
}

}  // namespace

std::string ModelSource::describe() const {
    if (!hf_repo.empty()) {
        // With -hfd, -md names the file of the repository (as llama-server).
        const std::string file_flag = hf_flag == "-hfd" ? " -md " : " -hff ";
        return hf_flag + " " + hf_repo + (hf_file.empty() ? "" : file_flag + hf_file);
    }
    if (!docker_repo.empty()) return "-dr " + docker_repo;
    return "-mu " + shown_url(url);
}

namespace {

// Docker Hub's registry, through libcommon's resolver (its download step
// would take the resolved file for a URL).
std::string fetch_docker(const ModelSource & source, const std::string & what) {
    if (source.offline) throw Error(what + ": Docker Hub needs the network; --offline takes -hf and -mu only");
    return common_docker_resolve_model(source.docker_repo);
}

std::string fetch_with_plan(const ModelSource & source, const std::string & what, DownloadLog & progress) {
    common_params p = download_params(source);
    common_models_handler handler = common_models_handler_init(p, LLAMA_EXAMPLE_SERVER);
    if (common_models_handler_is_preset_repo(handler)) {
        throw Error(what +
                    ": the repository holds a preset.ini for llama-server's router mode, which llama-tp-server "
                    "does not run; download a model file of it and pass it with -m");
    }
    if (!source.hf_repo.empty() && handler.plan.primary.path.empty()) {
        if (!source.hf_file.empty()) throw Error(what + ": the repository has no file " + source.hf_file);
        throw Error(what + ": no GGUF model found" +
                    (source.offline ? " in the cache (--offline)" : "; the lines above say why"));
    }
    common_models_handler_apply(handler, p, &progress);
    return p.model.path;
}

}  // namespace

std::string fetch_model(const ModelSource & source) {
    const std::string what = source.describe();
    DownloadLog progress;
    const DownloadCancel cancel;
    std::string path;
    try {
        // Around the plan too: it writes the repository's refs.
        const CacheLock lock(fs_get_cache_directory(), what, cancel);
        path = source.docker_repo.empty() ? fetch_with_plan(source, what, progress) : fetch_docker(source, what);
    } catch (const Error &) {
        throw;
    } catch (const std::exception & e) {
        if (cancel.requested()) throw DownloadInterrupted(what + ": download interrupted");
        throw Error(what + ": " + e.what());
    }
    if (path.empty() || !std::filesystem::exists(path)) {
        throw Error(what + ": no model file was fetched" + (source.offline ? " (--offline: the cache only)" : ""));
    }
    SRV_INF("model: %s is %s", what.c_str(), path.c_str());
    return path;
}

}  // namespace llama_tp::server
