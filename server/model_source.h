#pragma once
// Where the model comes from when the command line names a remote one
// (llama-server's -hf, -mu and -dr): libcommon's downloader fetches it into
// llama-server's cache (LLAMA_CACHE, MODEL_ENDPOINT, HF_TOKEN and --offline
// as there), so that both servers share one cache and one set of names.

#include "runtime/error.h"

#include <string>

namespace llama_tp::server {

struct ModelSource {
    std::string hf_repo;          // -hf owner/name[:tag]
    std::string hf_flag = "-hf";  // the flag that named it: -hfd for a draft model
    std::string hf_file;          // -hff: a file of the repository instead of the tag's choice
    std::string hf_token;         // -hft / HF_TOKEN
    std::string url;              // -mu
    std::string docker_repo;      // -dr
    std::string path;             // -m with -mu: where the file is saved
    bool offline = false;         // --offline: the cache only

    bool remote() const { return !hf_repo.empty() || !url.empty() || !docker_repo.empty(); }
    // "-hf owner/name:tag" (the flag and its value), for logs and errors.
    std::string describe() const;
};

// A download stopped by SIGINT or SIGTERM: the server exits as after a signal.
class DownloadInterrupted : public Error {
  public:
    using Error::Error;
};

// Fetches what the cache lacks and returns the local path of the model (the
// first file of a model split into several). Processes of one host fetching
// the same source take turns (a lock file in llama-server's cache
// directory), so an MPI launch downloads once and the others find the file.
// Throws llama_tp::Error naming the source.
std::string fetch_model(const ModelSource & source);

}  // namespace llama_tp::server
