#include "server/model_source.h"

#include "arg.h"
#include "common.h"
#include "download.h"
#include "plugin/error.h"
#include "server/log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

namespace llama_tp::server {

namespace {

// One process of a host downloads at a time; the next finds the file cached.
class CacheLock {
  public:
    explicit CacheLock(const std::string & directory) {
        std::error_code ec;
        std::filesystem::create_directories(directory, ec);
        const std::string path = (std::filesystem::path(directory) / "llama-tp-fetch.lock").string();
        fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd_ < 0) throw Error("cannot open " + path + ": " + std::strerror(errno));
        if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
        SRV_INF("model: waiting for another process fetching into %s", directory.c_str());
        while (::flock(fd_, LOCK_EX) != 0) {
            if (errno != EINTR) throw Error("cannot lock " + path + ": " + std::strerror(errno));
        }
    }
    ~CacheLock() { ::close(fd_); }  // closing releases the lock
    CacheLock(const CacheLock &) = delete;
    CacheLock & operator=(const CacheLock &) = delete;

  private:
    int fd_ = -1;
};

// Progress as log lines (every tenth of a file), not a terminal bar: the
// server's log goes to files and journals. SIGINT and SIGTERM are blocked
// until the server runs, so a pending one cancels the download.
class DownloadLog : public common_download_callback {
  public:
    void on_start(const common_download_progress & p) override {
        if (!p.cached) SRV_INF("model: downloading %s", p.url.c_str());
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
        if (!ok) SRV_ERR("model: download of %s failed", p.url.c_str());
    }
    bool is_cancelled() const override {
        sigset_t pending;
        sigemptyset(&pending);
        sigpending(&pending);
        return sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1;
    }

  private:
    static constexpr size_t kShownFrom = 64u << 20;  // smaller files arrive before a line would help
    static std::string file_name(const std::string & url) {
        const std::string path = url.substr(0, url.find('?'));
        return path.substr(path.rfind('/') + 1);
    }
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
    if (!hf_repo.empty()) return "-hf " + hf_repo + (hf_file.empty() ? "" : " -hff " + hf_file);
    if (!docker_repo.empty()) return "-dr " + docker_repo;
    return "-mu " + url;
}

std::string fetch_model(const ModelSource & source) {
    common_params p = download_params(source);
    const std::string what = source.describe();
    DownloadLog progress;
    try {
        common_models_handler handler = common_models_handler_init(p, LLAMA_EXAMPLE_SERVER);
        if (common_models_handler_is_preset_repo(handler)) {
            throw Error(what +
                        ": the repository holds a preset.ini for llama-server's router mode, which "
                        "llama-tp-server does not run; name a model file with -hff");
        }
        if (!source.hf_repo.empty() && handler.plan.primary.path.empty()) {
            throw Error(what + ": no GGUF model found" +
                        (source.offline ? " in the cache (--offline)" : "; the lines above say why"));
        }
        const CacheLock lock(fs_get_cache_directory());
        common_models_handler_apply(handler, p, &progress);
    } catch (const Error &) {
        throw;
    } catch (const std::exception & e) {
        if (progress.is_cancelled()) throw Error(what + ": download interrupted");
        throw Error(what + ": " + e.what());
    }
    if (p.model.path.empty() || !std::filesystem::exists(p.model.path)) {
        throw Error(what + ": no model file was fetched" + (source.offline ? " (--offline: the cache only)" : ""));
    }
    SRV_INF("model: %s is %s", what.c_str(), p.model.path.c_str());
    return p.model.path;
}

}  // namespace llama_tp::server
