#include "runtime/model/arch/architectures.h"

#include <utility>

namespace llama_tp {
namespace {

constexpr std::pair<const char *, ArchitectureReader> kArchitectures[] = {
    {"llama", read_llama},       {"qwen2", read_qwen2},         {"qwen3", read_qwen3},
    {"qwen3moe", read_qwen3moe}, {"phi3", read_phi3},           {"gemma2", read_gemma2},
    {"gemma3", read_gemma3},     {"gemma4", read_gemma4},       {"gpt-oss", read_gpt_oss},
    {"qwen35", read_qwen35},     {"qwen35moe", read_qwen35moe}, {"qwen3next", read_qwen3next},
    {"glm4moe", read_glm4moe},   {"deepseek2", read_deepseek2},
};

}  // namespace

ArchitectureReader find_architecture(const std::string & name) {
    for (const auto & [known, reader] : kArchitectures) {
        if (name == known) return reader;
    }
    return nullptr;
}

std::string architecture_names() {
    std::string out;
    for (const auto & entry : kArchitectures) out += (out.empty() ? "" : ", ") + std::string(entry.first);
    return out;
}

}  // namespace llama_tp
