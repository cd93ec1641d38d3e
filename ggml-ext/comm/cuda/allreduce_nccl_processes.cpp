#include "ggml-ext/comm/cuda/allreduce_nccl_processes.h"

#include "ggml-ext/comm/cuda/allreduce_nccl.h"
#include "ggml-ext/error.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace llama_tp {
namespace {

// Every process's error ("" where it had none), joined by process 0 and
// given to all: "" when every process succeeded.
std::string errors_of_all(ProcessGroup & group, const std::string & mine) {
    std::vector<std::vector<uint8_t>> parts;
    group.gather(std::vector<uint8_t>(mine.begin(), mine.end()), group.rank() == 0 ? &parts : nullptr,
                 Patience::Startup);
    std::vector<uint8_t> joined;
    if (group.rank() == 0) {
        std::string text;
        for (size_t p = 0; p < parts.size(); ++p) {
            if (parts[p].empty()) continue;
            text += (text.empty() ? "" : "; ") + std::string("process ") + std::to_string(p) + ": " +
                    std::string(parts[p].begin(), parts[p].end());
        }
        joined.assign(text.begin(), text.end());
    }
    group.broadcast(joined, Patience::Startup);
    return std::string(joined.begin(), joined.end());
}

// Process 0's unique id, or its error, in every process.
std::string share_unique_id(ProcessGroup & group, ncclUniqueId & id) {
    std::vector<uint8_t> bytes;
    if (group.rank() == 0) {
        const ncclResult_t status = ncclGetUniqueId(&id);
        if (status == ncclSuccess) {
            bytes.assign(reinterpret_cast<const uint8_t *>(&id), reinterpret_cast<const uint8_t *>(&id) + sizeof id);
        } else {
            const std::string why = std::string("ncclGetUniqueId: ") + ncclGetErrorString(status);
            bytes.assign(why.begin(), why.end());
        }
    }
    group.broadcast(bytes, Patience::Startup);
    if (bytes.size() == sizeof id) {
        std::memcpy(&id, bytes.data(), sizeof id);
        return "";
    }
    return "process 0: " + std::string(bytes.begin(), bytes.end());
}

}  // namespace

std::unique_ptr<AllReduceEngine> join_nccl_across(ProcessGroup & group, const AllReduceConfig & config,
                                                  std::string & why_not) {
    // A process that cannot take part must say so before the others wait
    // inside NCCL's initialisation for its ranks.
    std::string mine;
    try {
        NcclAllReduce::check_devices(config);
    } catch (const Error & e) {
        mine = e.what();
    }
    why_not = errors_of_all(group, mine);
    if (!why_not.empty()) return nullptr;

    NcclSpan span;
    span.first_rank = group.rank() * config.n_ranks;
    span.total_ranks = group.size() * config.n_ranks;
    why_not = share_unique_id(group, span.id);
    if (!why_not.empty()) return nullptr;

    std::unique_ptr<AllReduceEngine> engine;
    mine.clear();
    try {
        engine = std::make_unique<NcclAllReduce>(config, span);
    } catch (const Error & e) {
        mine = e.what();
    }
    why_not = errors_of_all(group, mine);
    if (why_not.empty()) return engine;
    if (engine) engine->abort("another process could not join NCCL");
    return nullptr;
}

}  // namespace llama_tp
