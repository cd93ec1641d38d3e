#pragma once
// The nccl engine across the processes of a group (ranks on CUDA devices in
// every process): process 0 makes NCCL's unique id and broadcasts it, every
// process makes its own ranks' communicators with it, and the processes use
// them only if all could; otherwise every process gets nothing and the
// caller takes another engine. Builds with NCCL only.

#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/comm/process_group.h"

#include <memory>
#include <string>

namespace llama_tp {

// config.n_ranks: this process's ranks (global ranks [group.rank() * n,
// group.rank() * n + n)), config.cuda_devices their devices. Every process
// of the group calls it at once. nullptr, with why_not set (the same text in
// every process), when a process could not join; throws llama_tp::Error only
// when the group itself failed.
std::unique_ptr<AllReduceEngine> join_nccl_across(ProcessGroup & group, const AllReduceConfig & config,
                                                  std::string & why_not);

}  // namespace llama_tp
