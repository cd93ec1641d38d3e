#pragma once
// The models of a --models-dir, found as llama-server's router finds them:
// each top-level .gguf file is a model named by its file name without
// ".gguf" (the first part of a split model; its other parts, multimodal
// projectors and draft models are not models of their own), and each
// subfolder is a model named by the folder, its first split part or else
// its last .gguf file.

#include <string>
#include <vector>

namespace llama_tp::server {

struct CatalogModel {
    std::string id;
    std::string path;
};

// Sorted by id. Throws llama_tp::Error when the folder cannot be read.
std::vector<CatalogModel> scan_models_dir(const std::string & dir);

}  // namespace llama_tp::server
