#include "server/model_catalog.h"

#include "plugin/error.h"

#include <algorithm>
#include <filesystem>
#include <regex>

namespace llama_tp::server {

namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string & s, const std::string & tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Projectors and draft models sit beside a model without being one.
bool is_companion(const std::string & name) {
    return name.find("mmproj") != std::string::npos || name.rfind("mtp-", 0) == 0 || name.rfind("dspark-", 0) == 0 ||
           name.rfind("dflash-", 0) == 0;
}

// 1 for "-00001-of-00003.gguf", 0 for a file in one piece.
int split_part(const std::string & name) {
    static const std::regex part(".*-([0-9]{5})-of-[0-9]{5}\\.gguf$");
    std::smatch m;
    return std::regex_match(name, m, part) ? std::stoi(m[1].str()) : 0;
}

std::vector<fs::directory_entry> sorted_entries(const fs::path & dir) {
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) throw Error("--models-dir " + dir.string() + ": " + ec.message());
    std::vector<fs::directory_entry> out(begin(it), end(it));
    std::sort(out.begin(), out.end(), [](const auto & a, const auto & b) { return a.path() < b.path(); });
    return out;
}

// A subfolder's model file: its first split part, else its last .gguf ("" for none).
std::string folder_model(const fs::path & dir) {
    std::string last;
    for (const fs::directory_entry & e : sorted_entries(dir)) {
        const std::string name = e.path().filename().string();
        if (!e.is_regular_file() || !ends_with(name, ".gguf") || is_companion(name)) continue;
        if (split_part(name) == 1) return e.path().string();
        if (split_part(name) == 0) last = e.path().string();
    }
    return last;
}

}  // namespace

std::vector<CatalogModel> scan_models_dir(const std::string & dir) {
    std::vector<CatalogModel> out;
    for (const fs::directory_entry & e : sorted_entries(dir)) {
        const std::string name = e.path().filename().string();
        if (e.is_directory()) {
            const std::string model = folder_model(e.path());
            if (!model.empty()) out.push_back({name, model});
        } else if (e.is_regular_file() && ends_with(name, ".gguf") && !is_companion(name) && split_part(name) <= 1) {
            out.push_back({name.substr(0, name.size() - 5), e.path().string()});
        }
    }
    std::sort(out.begin(), out.end(), [](const CatalogModel & a, const CatalogModel & b) { return a.id < b.id; });
    return out;
}

}  // namespace llama_tp::server
