#pragma once
// The models a router serves, read with libcommon's own preset loader (the
// pinned llama-server's rules): the models in llama-server's cache
// (LLAMA_CACHE; USER/REPO:TAG, served with -hf), the models of --models-dir (each top-level
// .gguf file named by its file name without ".gguf", each subfolder by its
// name, projectors and draft models beside them not counted), and the
// sections of --models-preset (an INI file of llama-server options by name;
// [*] applies to every model; a section of a folder model's name adds to
// it, any other is a model of its own).

#include <string>
#include <vector>

namespace llama_tp::server {

struct CatalogModel {
    std::string id;
    std::string path;               // the model file, or the repository it comes from
    std::vector<std::string> args;  // the model's options as command-line words, its file's included
    bool load_on_startup = false;   // the preset's load-on-startup
    int stop_timeout_s = 10;        // the preset's stop-timeout: SIGKILL after this much grace
    // A cached model whose file a preset with dedup-cache-models names
    // (hf-repo, or its draft's): served, not listed by /v1/models.
    bool hidden = false;
};

// Sorted by id. Throws llama_tp::Error naming the file or folder at fault.
std::vector<CatalogModel> load_catalog(const std::string & models_dir, const std::string & presets_file);

}  // namespace llama_tp::server
