#include "runtime/ranks/thread_rank_group.h"

#include "runtime/error.h"
#include "runtime/ranks/rank.h"
#include "runtime/ranks/rank_threads.h"
#include "runtime/shard/shard_plan.h"

namespace llama_tp {

ThreadRankGroup::ThreadRankGroup(const RankSetup & setup, std::unique_ptr<AllReduceEngine> allreduce)
    : n_vocab_(setup.options->embeddings ? setup.hp->n_embd : setup.hp->n_vocab),
      first_rank_(setup.first_rank),
      allreduce_(std::move(allreduce)) {
    threads_ = std::make_unique<RankThreads>(setup.n_local);
    ranks_.resize(setup.n_local);
    const EngineOptions & o = *setup.options;
    threads_->run(
        [&](int local) {
            RankConfig rc;
            rc.rank = setup.first_rank + local;
            rc.n_ranks = setup.n_ranks;
            rc.device = setup.devices[local];
            rc.ops = setup.ops;
            rc.collectives = setup.collectives;
            rc.shard = &setup.plan->ranks[rc.rank];
            rc.split_invariant = o.exact_sums();
            rc.one_pass_products = o.one_pass_products.value_or(false);
            rc.allreduce = allreduce_.get();
            rc.n_threads = setup.n_threads;
            rc.threads_poll = !o.shares_cores;
            rc.kv_sizes = setup.kv_sizes;
            rc.kv_types = o.kv_types;
            rc.embeddings = o.embeddings;
            rc.keep_hidden = o.keep_hidden;
            rc.progress = o.progress && rc.rank == 0;
            rc.check_tensors = o.check_tensors;
            rc.adapters = setup.adapters;
            rc.control = setup.control;
            ranks_[local] = std::make_unique<Rank>(*setup.file, *setup.hp, rc);
        },
        [](int, const char *) {});
}

ThreadRankGroup::~ThreadRankGroup() {
    if (allreduce_) allreduce_->abort("rank group shutting down");
    ranks_.clear();
}

void ThreadRankGroup::run(const Step & step, float * logits) {
    threads_->run([&](int local) { ranks_[local]->run(step, logits, n_vocab_); },
                  [&](int local, const char * what) {
                      if (allreduce_)
                          allreduce_->abort("rank " + std::to_string(first_rank_ + local) + " failed: " + what);
                  });
    if (allreduce_ && allreduce_->failed()) throw Error(allreduce_->error());
}

const std::vector<float> & ThreadRankGroup::hidden_rows() const {
    return ranks_[0]->hidden_rows();
}

void ThreadRankGroup::read(const Step & step, uint8_t * image) {
    for (auto & r : ranks_) r->read(step, image);
}

std::vector<RankReport> ThreadRankGroup::reports() const {
    std::vector<RankReport> out;
    for (const auto & r : ranks_) out.push_back({r->memory_bytes(), r->weight_bytes(), r->n_params()});
    return out;
}

std::vector<CollectiveStats> ThreadRankGroup::collective_stats() const {
    std::vector<CollectiveStats> out;
    for (const auto & r : ranks_) out.push_back(r->collective_stats());
    return out;
}

int64_t ThreadRankGroup::graph_builds() const {
    return ranks_[0]->graph_builds();
}

std::string ThreadRankGroup::failure() const {
    return allreduce_ && allreduce_->failed() ? allreduce_->error() : "";
}

void ThreadRankGroup::abort(const std::string & why) {
    if (allreduce_) allreduce_->abort(why);
}

std::string ThreadRankGroup::allreduce_name() const {
    return allreduce_ ? allreduce_->name() : "none";
}

}  // namespace llama_tp
