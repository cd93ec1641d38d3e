#include "server/serving/lora_adapters.h"

#include "server/http/api_error.h"

#include <cmath>

namespace llama_tp::server {

LoraAdapters::LoraAdapters(const std::vector<LoraOptions> & adapters, bool init_without_apply) {
    for (const LoraOptions & a : adapters) {
        const LoraAdapterInfo adapter = describe_lora_adapter(a.path);
        info_.push_back({a.path, adapter.task_name, adapter.prompt_prefix});
        scales_.push_back(init_without_apply ? 0.0f : a.scale);
    }
}

std::vector<float> LoraAdapters::scales() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return scales_;
}

void LoraAdapters::set_scales(std::vector<float> scales) {
    std::lock_guard<std::mutex> lock(mutex_);
    scales_ = std::move(scales);
}

std::vector<float> LoraAdapters::parse(const nlohmann::json & list, const std::string & param) const {
    if (!list.is_array()) throw bad_request("'" + param + "' must be an array of {\"id\", \"scale\"}", param);
    std::vector<float> scales(info_.size(), 0.0f);
    for (const auto & entry : list) {
        if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_number_integer()) {
            throw bad_request("every entry of '" + param + "' needs an integer 'id'", param, "invalid_type");
        }
        const int64_t id = entry["id"].get<int64_t>();
        if (id < 0 || id >= (int64_t) info_.size()) {
            throw bad_request("'" + param + "' names adapter " + std::to_string(id) + ", but " +
                                  (info_.empty() ? std::string("no adapter is loaded (--lora)")
                                                 : "the adapters are 0 to " + std::to_string(info_.size() - 1)),
                              param, "invalid_value");
        }
        const auto scale = entry.find("scale");
        const float value = scale != entry.end() && scale->is_number() ? scale->get<float>() : 0.0f;
        if (scale != entry.end() && (!scale->is_number() || !std::isfinite(value))) {
            throw bad_request(
                "'" + param + "': the scale of adapter " + std::to_string(id) + " must be a finite number", param,
                "invalid_type");
        }
        scales[(size_t) id] = value;
    }
    return scales;
}

nlohmann::json LoraAdapters::to_json() const {
    const std::vector<float> s = scales();
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < info_.size(); ++i) {
        out.push_back({{"id", i},
                       {"path", info_[i].path},
                       {"scale", s[i]},
                       {"task_name", info_[i].task_name},
                       {"prompt_prefix", info_[i].prompt_prefix}});
    }
    return out;
}

}  // namespace llama_tp::server
