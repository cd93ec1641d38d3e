#include "ggml-ext/comm/host/allreduce_none.h"

#include "ggml-ext/error.h"

namespace llama_tp {

NoneAllReduce::NoneAllReduce(const AllReduceConfig & config) {
    if (config.n_ranks != 1) {
        throw Error("allreduce engine none serves a single rank, not " + std::to_string(config.n_ranks) +
                    " (use auto, cpu or butterfly)");
    }
}

void NoneAllReduce::check_rank(int rank) {
    if (rank == 0) return;
    failure_.fail([&] { return bad_rank_message(rank, 1); });
}

}  // namespace llama_tp
