#include "server/router/model_catalog.h"

#include "runtime/error.h"

#include "download.h"
#include "preset.h"

#include <algorithm>
#include <cstdlib>
#include <set>

namespace llama_tp::server {

namespace {

std::string option(const common_preset & p, const char * env) {
    std::string value;
    return p.get_option(env, value) ? value : "";
}

CatalogModel model_of(const common_preset & p) {
    CatalogModel m;
    m.id = p.name;
    m.path = option(p, "LLAMA_ARG_MODEL");
    if (m.path.empty()) m.path = option(p, "LLAMA_ARG_HF_REPO");
    if (m.path.empty()) {
        throw Error("--models-preset: [" + p.name + "] names no model (model = FILE, or hf-repo = USER/MODEL)");
    }
    m.args = p.to_args();
    const std::string on_startup = option(p, COMMON_ARG_PRESET_LOAD_ON_STARTUP);
    m.load_on_startup = !on_startup.empty() && common_arg_utils::is_truthy(on_startup);
    const std::string timeout = option(p, COMMON_ARG_PRESET_STOP_TIMEOUT);
    if (!timeout.empty()) {
        char * end = nullptr;
        const long s = std::strtol(timeout.c_str(), &end, 10);
        if (*end != '\0' || s < 0) throw Error("--models-preset: [" + p.name + "] stop-timeout '" + timeout + "'");
        m.stop_timeout_s = (int) s;
    }
    return m;
}

// Runs a libcommon loader; its exception becomes one naming the source.
template <typename Load>
common_presets loaded(const std::string & source, Load load) {
    try {
        return load();
    } catch (const std::exception & e) {
        std::string why = e.what();
        while (!why.empty() && why.back() == '\n') why.pop_back();
        if (why.rfind("error: ", 0) == 0) why = why.substr(7);
        throw Error(source + ": " + why);
    }
}

// The cached files that presets with dedup-cache-models resolve to, as
// llama-server finds them (their hf-repo and the draft's -hfd).
std::set<std::string> deduplicated_files(const common_presets & presets) {
    std::set<std::string> files;
    auto add = [&files](const common_preset & p, const char * repo_env, const char * file_env) {
        const std::string repo = option(p, repo_env);
        if (repo.empty()) return;
        const std::string path = common_download_resolve_path(repo, option(p, file_env));
        if (!path.empty()) files.insert(path);
    };
    for (const auto & [name, p] : presets) {
        const std::string dedup = option(p, COMMON_ARG_PRESET_DEDUP_CACHE_MODELS);
        if (dedup.empty() || !common_arg_utils::is_truthy(dedup)) continue;
        add(p, "LLAMA_ARG_HF_REPO", "LLAMA_ARG_HF_FILE");
        add(p, "LLAMA_ARG_SPEC_DRAFT_HF_REPO", "LLAMA_ARG_SPEC_DRAFT_MODEL");
    }
    return files;
}

}  // namespace

std::vector<CatalogModel> load_catalog(const std::string & models_dir, const std::string & presets_file) {
    common_preset_context ctx(LLAMA_EXAMPLE_SERVER);
    common_preset global;
    common_presets folder, presets;
    // The cache's models (USER/REPO:TAG, each served with -hf), then the
    // folder's, which win over a cached one of the same name.
    folder = loaded("llama-server's cache", [&] { return ctx.load_from_cache(); });
    std::set<std::string> cached;  // the names only the cache has
    for (const auto & [name, preset] : folder) cached.insert(name);
    if (!models_dir.empty()) {
        for (auto & [name, preset] :
             loaded("--models-dir " + models_dir, [&] { return ctx.load_from_models_dir(models_dir); })) {
            folder[name] = preset;
            cached.erase(name);
        }
    }
    if (!presets_file.empty()) {
        presets = loaded("--models-preset " + presets_file, [&] { return ctx.load_from_ini(presets_file, global); });
    }
    // [*] under every model; a section over the folder's model of its name.
    for (const auto & [name, preset] : presets) cached.erase(name);
    const common_presets with_global = ctx.cascade(global, presets);
    const std::set<std::string> dedup = deduplicated_files(with_global);
    const common_presets models = ctx.cascade(ctx.cascade(global, folder), with_global);
    std::vector<CatalogModel> out;
    for (const auto & [name, preset] : models) {
        out.push_back(model_of(preset));
        out.back().hidden = !dedup.empty() && cached.count(name) && dedup.count(common_download_resolve_path(name));
    }
    std::sort(out.begin(), out.end(), [](const CatalogModel & a, const CatalogModel & b) { return a.id < b.id; });
    return out;
}

}  // namespace llama_tp::server
