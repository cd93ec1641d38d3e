#include "plugin/engine.h"

#include "ggml-ext/allreduce_engine.h"
#include "plugin/error.h"
#include "plugin/gguf_file.h"
#include "plugin/hparams.h"
#include "plugin/rank.h"
#include "plugin/rank_threads.h"
#include "plugin/shard_plan.h"
#include "plugin/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <thread>

namespace llama_tp {

namespace {

std::string file_name_of(const std::string & path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Every rank holds the same model shape over its own shard; rank 0's caller
// thread drives them all. With one rank there are no collectives at all.
class TensorParallelEngine final : public Engine {
  public:
    explicit TensorParallelEngine(const EngineOptions & options) : options_(options) {
        GgufFile file(options.model_path);
        hp_ = read_hparams(file);
        tokenizer_ = std::make_unique<Tokenizer>(options.model_path);
        if (tokenizer_->n_vocab() != hp_.n_vocab) {
            throw Error("model file '" + options.model_path + "': vocabulary has " +
                        std::to_string(tokenizer_->n_vocab()) + " tokens but token_embd.weight has " +
                        std::to_string(hp_.n_vocab) + " rows");
        }
        validate_options();
        const int tp = options_.tp;
        const bool sharded = tp > 1 || options_.split_invariant;
        if (sharded) plan_ = ShardPlan::plan(file, hp_, tp, options_.tensor_split, options_.split_invariant);
        if (tp > 1) {
            AllReduceConfig ac;
            const std::string env = allreduce_engine_from_env();
            ac.engine = options_.allreduce == "auto" && !env.empty() ? env : options_.allreduce;
            ac.n_ranks = tp;
            ac.wire = options_.allreduce_bf16 ? WireType::BF16 : WireType::F32;
            allreduce_ = make_allreduce_engine(ac);
        }
        threads_ = std::make_unique<RankThreads>(tp);
        ranks_.resize(tp);
        // Ranks load in parallel, each reading only its own slices.
        threads_->run(
            [&](int r) {
                RankConfig rc;
                rc.rank = r;
                rc.n_ranks = tp;
                rc.shard = sharded ? &plan_.ranks[r] : nullptr;
                rc.split_invariant = options_.split_invariant;
                rc.allreduce = allreduce_.get();
                rc.n_threads = std::max(1, options_.n_threads / tp);
                rc.n_ctx = options_.n_ctx;
                rc.n_seq_max = options_.n_seq_max;
                rc.kv_unified = options_.kv_unified;
                rc.progress = options_.progress && r == 0;
                ranks_[r] = std::make_unique<Rank>(file, hp_, rc);
            },
            [](int, const char *) {});
        fill_info(file);
    }

    ~TensorParallelEngine() override {
        if (allreduce_) allreduce_->abort("engine shutting down");
        ranks_.clear();
    }

    void decode(const Batch & batch) override {
        validate_batch(batch);
        std::vector<int64_t> cells;
        std::string why;
        if (!place(batch, cells, why)) throw Error("KV cache full: " + why);
        try {
            run(batch, cells);
        } catch (...) {
            for (auto & r : ranks_) r->kv().unplace(cells);
            throw;
        }
    }

    const float * logits(int32_t batch_row) const override {
        if (batch_row < 0 || batch_row >= (int32_t) output_index_.size() || output_index_[batch_row] < 0) {
            throw Error("no logits for batch row " + std::to_string(batch_row) + " (not requested)");
        }
        return logits_.data() + (size_t) output_index_[batch_row] * hp_.n_vocab;
    }

    void seq_remove(int32_t seq, int32_t p0, int32_t p1) override {
        for (auto & r : ranks_) r->kv().seq_remove(seq, p0, p1);
    }
    int32_t seq_pos_max(int32_t seq) const override { return ranks_[0]->kv().seq_pos_max(seq); }
    int32_t n_free_cells() const override { return ranks_[0]->kv().n_free(); }
    const Tokenizer & tokenizer() const override { return *tokenizer_; }
    const ModelInfo & info() const override { return info_; }
    const EngineOptions & options() const override { return options_; }
    int64_t graph_builds() const override { return ranks_[0]->graph_builds(); }
    std::vector<CollectiveStats> collective_stats() const override {
        std::vector<CollectiveStats> out;
        for (const auto & r : ranks_) out.push_back(r->collective_stats());
        return out;
    }
    std::vector<uint64_t> rank_memory_bytes() const override {
        std::vector<uint64_t> out;
        for (const auto & r : ranks_) out.push_back(r->memory_bytes());
        return out;
    }

  private:
    void validate_options() {
        if (options_.tp < 1) throw Error("--tp must be at least 1");
        if (options_.n_ctx <= 0) options_.n_ctx = hp_.n_ctx_train;
        if (options_.n_seq_max < 1) throw Error("the number of sequences must be at least 1");
        if (options_.n_batch < 1) throw Error("the batch size must be at least 1");
        if (options_.n_threads <= 0) options_.n_threads = (int32_t) std::max(1u, std::thread::hardware_concurrency());
        if (options_.n_threads < options_.tp) options_.n_threads = options_.tp;
        if (options_.split_invariant && options_.allreduce_bf16) {
            throw Error("--split-invariant needs exact sums and --bf16-wire rounds them: use one or the other");
        }
    }

    void validate_batch(const Batch & batch) const {
        const int n = batch.size();
        if (n == 0) throw Error("empty batch");
        if (n > options_.n_batch) {
            throw Error("batch of " + std::to_string(n) + " tokens exceeds the batch size " +
                        std::to_string(options_.n_batch));
        }
        if ((int) batch.pos.size() != n || (int) batch.seq.size() != n || (int) batch.want_logits.size() != n) {
            throw Error("inconsistent batch: field lengths differ");
        }
        for (int i = 0; i < n; ++i) {
            if (batch.tokens[i] < 0 || batch.tokens[i] >= hp_.n_vocab) {
                throw Error("token id " + std::to_string(batch.tokens[i]) + " is outside the vocabulary [0, " +
                            std::to_string(hp_.n_vocab) + ")");
            }
            if (batch.seq[i] < 0 || batch.seq[i] >= options_.n_seq_max) {
                throw Error("sequence id " + std::to_string(batch.seq[i]) + " is outside [0, " +
                            std::to_string(options_.n_seq_max) + ")");
            }
            if (batch.pos[i] < 0) throw Error("negative position in batch");
        }
    }

    // Every rank's cache makes the same choice (same algorithm, same state).
    bool place(const Batch & batch, std::vector<int64_t> & cells, std::string & why) {
        if (!ranks_[0]->kv().place(batch, cells, &why)) return false;
        std::vector<int64_t> other;
        for (size_t r = 1; r < ranks_.size(); ++r) ranks_[r]->kv().place(batch, other);
        return true;
    }

    void run(const Batch & batch, const std::vector<int64_t> & cells) {
        const int n = batch.size();
        std::vector<int32_t> out_rows;
        output_index_.assign(n, -1);
        for (int i = 0; i < n; ++i) {
            if (batch.want_logits[i]) {
                output_index_[i] = (int32_t) out_rows.size();
                out_rows.push_back(i);
            }
        }
        if (out_rows.empty()) out_rows.push_back(n - 1);  // the graph always has one output row
        const KvCache & kv = ranks_[0]->kv();
        const GraphShape shape{n, (int32_t) out_rows.size(), kv.attention_runs(batch)};
        mask_.resize(shape.mask_size());
        size_t offset = 0;
        for (const AttentionRun & r : shape.runs) {
            kv.fill_mask(batch, r, mask_.data() + offset);
            offset += (size_t) r.window * r.size();
        }
        logits_.assign((size_t) out_rows.size() * hp_.n_vocab, 0.0f);

        threads_->run(
            [&](int r) {
                ranks_[r]->prepare(batch, cells, out_rows, shape, mask_);
                ranks_[r]->compute();
                ranks_[r]->gather_logits(logits_.data(), hp_.n_vocab);
            },
            [&](int r, const char * what) {
                if (allreduce_) allreduce_->abort("rank " + std::to_string(r) + " failed: " + what);
            });
        if (allreduce_ && allreduce_->failed()) throw Error(allreduce_->error());
    }

    void fill_info(const GgufFile & file) {
        info_.path = options_.model_path;
        info_.name = file.get_string("general.name", file_name_of(options_.model_path));
        info_.architecture = hp_.arch_name;
        info_.n_vocab = hp_.n_vocab;
        info_.n_ctx_train = hp_.n_ctx_train;
        info_.n_embd = hp_.n_embd;
        info_.n_layer = hp_.n_layer;
        info_.n_head = hp_.n_head;
        info_.n_head_kv = hp_.n_head_kv;
        // Per rank figures summed; mirrored tensors count once per rank.
        for (const auto & r : ranks_) {
            info_.n_params += r->n_params();
            info_.weight_bytes += r->weight_bytes();
        }
        info_.tp = options_.tp;
        info_.allreduce = allreduce_ ? allreduce_->name() : "none";
        info_.shard_plan = options_.tp > 1 ? plan_.describe() : "";
    }

    EngineOptions options_;
    HParams hp_;
    ModelInfo info_;
    ShardPlan plan_;
    std::unique_ptr<Tokenizer> tokenizer_;
    std::unique_ptr<AllReduceEngine> allreduce_;
    std::vector<std::unique_ptr<Rank>> ranks_;
    std::unique_ptr<RankThreads> threads_;
    std::vector<ggml_fp16_t> mask_;
    std::vector<float> logits_;
    std::vector<int32_t> output_index_;
};

}  // namespace

std::unique_ptr<Engine> Engine::load(const EngineOptions & options) {
    return std::make_unique<TensorParallelEngine>(options);
}

}  // namespace llama_tp
