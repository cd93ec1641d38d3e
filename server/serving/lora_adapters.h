#pragma once
// The server's LoRA adapters (--lora, --lora-scaled): what GET
// /lora-adapters lists, the global scales POST /lora-adapters sets, and a
// request's own `lora` list read against them, in llama-server's shapes.
// Scales apply per request: the scheduler puts each token's into the batch.

#include "runtime/engine.h"

#include <nlohmann/json.hpp>

#include <mutex>
#include <string>
#include <vector>

namespace llama_tp::server {

class LoraAdapters {
  public:
    // Reads each adapter's adapter.lora.task_name and prompt_prefix. The
    // global scales start at the flags' (0 with --lora-init-without-apply).
    LoraAdapters(const std::vector<LoraOptions> & adapters, bool init_without_apply);

    size_t size() const { return info_.size(); }
    std::vector<float> scales() const;
    void set_scales(std::vector<float> scales);

    // [{"id": i, "scale": s}, ...]: the listed adapters at their scales, the
    // others at 0, as llama-server reads it. Throws ApiError (400) naming
    // param for anything else, an unknown id included.
    std::vector<float> parse(const nlohmann::json & list, const std::string & param) const;

    nlohmann::json to_json() const;  // GET /lora-adapters

  private:
    struct Info {
        std::string path, task_name, prompt_prefix;
    };
    std::vector<Info> info_;
    mutable std::mutex mutex_;
    std::vector<float> scales_;
};

}  // namespace llama_tp::server
