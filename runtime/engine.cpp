#include "runtime/engine.h"

#include "ggml-ext/comm/allreduce_engine.h"
#include "ggml-ext/ops/exact_matmul.h"
#include "runtime/error.h"
#include "runtime/model/gguf_file.h"
#include "runtime/model/hparams.h"
#include "ggml-ext/comm/process_group.h"
#include "runtime/kv/kv_cells.h"
#include "runtime/kv/kv_image.h"
#include "runtime/load_agreement.h"
#include "runtime/plan/runtime_plan.h"
#include "runtime/ranks/mpi_rank_group.h"
#include "runtime/ranks/rank_devices.h"
#include "runtime/shard/shard_plan.h"
#include "runtime/ranks/step.h"
#include "runtime/ranks/thread_rank_group.h"
#include "runtime/text/tokenizer.h"
#include "runtime/model/weights.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "ggml.h"

namespace llama_tp {

namespace {

// Rank 0's side of a rank group: it validates every batch, decides its
// placement on its own copy of the cells' bookkeeping and hands the ranks
// one step. With one rank there are no collectives at all.
class TensorParallelEngine final : public Engine {
  public:
    explicit TensorParallelEngine(const EngineOptions & options) : options_(options) {
        GgufFile file(options_.model_path, options_.metadata_overrides);
        ProcessGroup * processes = options_.processes;
        const int n_processes = processes ? processes->size() : 1;
        std::vector<std::unique_ptr<GgufFile>> adapters;  // open for the load
        for (const LoraOptions & l : options_.loras) adapters.push_back(open_adapter(l.path));
        if (n_processes > 1) {
            const std::string source = "model file '" + options_.model_path + "'";
            MpiRankGroup::agree(*processes, setup_agreement(options_, file) + adapters_agreement(options_, adapters),
                                source);
            MpiRankGroup::agree(*processes, data_agreement(file, options_.n_threads), source);
        }
        hp_ = read_hparams(file, options_.mtp_head);
        for (const MetadataOverride & o : options_.metadata_overrides) {
            std::fprintf(stderr, "llama-tp: metadata override %s\n", o.describe().c_str());
        }
        if (options_.rope.any()) {
            apply_rope_overrides(hp_, options_.rope);
            std::fprintf(stderr,
                         "llama-tp: RoPE as asked: freq base %g, freq scale %g, YaRN ext factor %g, attn factor %g, "
                         "beta fast %g, slow %g, original context %d\n",
                         hp_.rope_freq_base, hp_.rope_freq_scale, hp_.yarn_ext_factor, hp_.yarn_attn_factor,
                         hp_.yarn_beta_fast, hp_.yarn_beta_slow, hp_.rope_n_ctx_orig);
        }
        tokenizer_ = std::make_unique<Tokenizer>(options_.model_path, options_.metadata_overrides);
        if (tokenizer_->n_vocab() != hp_.n_vocab) {
            throw Error("model file '" + options_.model_path + "': vocabulary has " +
                        std::to_string(tokenizer_->n_vocab()) + " tokens but token_embd.weight has " +
                        std::to_string(hp_.n_vocab) + " rows");
        }
        validate_options();
        const int tp = options_.tp, n_ranks = tp * n_processes;
        choose_devices(processes ? processes->local_rank() * tp : 0);
        resolve(file);
        if (n_processes > 1) {
            // The ranks' devices may decide the sums: every process must take the same.
            MpiRankGroup::agree(*processes, std::string("sums: ") + (options_.exact_sums() ? "exact" : "float") + "\n");
        }
        plan_ = ShardPlan::plan(file, hp_, n_ranks, options_.tensor_split, options_.exact_sums());
        // GPU ranks attend with ggml's attention, fastest over whole windows.
        kv_sizes_ = KvPoolSizes::of(hp_, options_.n_ctx, options_.n_seq_max, options_.kv_unified, options_.n_batch,
                                    options_.swa_full, !runtime_.host_ops());
        kv_sizes_.saved_states = kv_sizes_.recurrent && options_.draft_states;
        cells_ = std::make_unique<KvPools>(kv_sizes_);
        log_window_pool();
        RankSetup setup;
        std::unique_ptr<ThreadRankGroup> local = load_local_ranks(file, adapters, setup);
        if (n_processes > 1) {
            log_ranks(setup, *processes, local->reports());
            auto group = std::make_unique<MpiRankGroup>(
                *processes, std::move(local), process_vocab(n_processes), row_width(), process_kv_heads(n_processes),
                [this](int32_t n) { return KvImageLayout::of(hp_, options_.kv_types, n, kv_sizes_.window_keep); });
            processes_group_ = group.get();
            group_ = std::move(group);
        } else {
            group_ = std::move(local);
        }
        fill_info(file);
        if (options_.embeddings && !follower()) head_ = ClassifierHead::read(file, hp_);
    }

    // This process's ranks, loaded from the file with the adapters and the
    // control vector (agreed with the other processes of a launch).
    std::unique_ptr<ThreadRankGroup> load_local_ranks(const GgufFile & file,
                                                      const std::vector<std::unique_ptr<GgufFile>> & adapters,
                                                      RankSetup & setup) {
        ProcessGroup * processes = options_.processes;
        const int n_processes = processes ? processes->size() : 1;
        const int tp = options_.tp;
        setup.file = &file;
        setup.hp = &hp_;
        setup.plan = &plan_;
        setup.options = &options_;
        setup.kv_sizes = kv_sizes_;
        setup.first_rank = processes ? processes->rank() * tp : 0;
        setup.n_local = tp;
        setup.n_ranks = tp * n_processes;
        setup.n_threads = std::max(1, options_.n_threads / tp);
        setup.devices = devices_.devices;
        setup.ops = runtime_.ops;
        for (const auto & a : adapters) setup.adapters.push_back(a.get());
        const ControlVector control = load_control_vector();
        if (n_processes > 1) MpiRankGroup::agree(*processes, control.describe() + "\n");
        // What the shard plan, the cache sizes and info() were made from: a
        // reload after a sleep must find the same files.
        const std::string source =
            setup_agreement(options_, file) + adapters_agreement(options_, adapters) + control.describe();
        if (loaded_from_.empty()) {
            loaded_from_ = source;
        } else if (source != loaded_from_) {
            throw Error("model file '" + options_.model_path +
                        "' (or an adapter or control vector) changed since it was loaded; restart the server");
        }
        setup.control = control.empty() ? nullptr : &control;
        std::unique_ptr<AllReduceEngine> allreduce;
        if (n_processes > 1) {
            allreduce = process_allreduce(*processes);
        } else if (tp > 1) {
            allreduce = make_allreduce_engine(runtime_.allreduce);
        }
        setup.collectives = runtime_.collectives(allreduce.get());
        const bool says = !runtime_.host_ops() && allreduce && (!processes || processes->rank() == 0);
        if (says && runtime_.capture_asked && setup.collectives != CollectivePath::Captured &&
            setup.collectives != CollectivePath::ThroughHost) {
            std::fprintf(stderr,
                         "llama-tp: warning: whole steps are not captured into CUDA graphs: the %s engine's "
                         "sums cannot be replayed from one\n",
                         allreduce->name());
        }
        if (says) std::fprintf(stderr, "llama-tp: collectives %s\n", collective_path_name(setup.collectives));
        auto local = std::make_unique<ThreadRankGroup>(setup, std::move(allreduce));
        setup.control = nullptr;  // gone with this call
        setup.adapters.clear();
        return local;
    }

    std::string failure() const override {
        std::lock_guard<std::mutex> lock(group_mutex_);
        return group_ ? group_->failure() : aborted_;
    }
    void abort(const std::string & why) override {
        std::lock_guard<std::mutex> lock(group_mutex_);
        if (aborted_.empty()) aborted_ = why.empty() ? "aborted" : why;
        if (group_) group_->abort(why);
    }

    void sleep() override {
        if (options_.processes && options_.processes->size() > 1) {
            throw Error("a group of processes cannot sleep: the other processes hold their shards");
        }
        if (!group_) return;
        std::lock_guard<std::mutex> lock(group_mutex_);
        slept_stats_ = collective_stats_locked();
        slept_graph_builds_ += group_->graph_builds();
        group_.reset();
        cells_ = std::make_unique<KvPools>(kv_sizes_);
        pending_edits_.clear();
        std::vector<float>().swap(logits_);
        output_index_.clear();
    }

    void wake() override {
        if (group_) return;
        auto refuse_if_aborted = [this] {
            std::lock_guard<std::mutex> lock(group_mutex_);
            if (!aborted_.empty()) throw Error("the engine was stopped: " + aborted_);
        };
        refuse_if_aborted();
        GgufFile file(options_.model_path, options_.metadata_overrides);
        std::vector<std::unique_ptr<GgufFile>> adapters;
        for (const LoraOptions & l : options_.loras) adapters.push_back(open_adapter(l.path));
        RankSetup setup;
        std::unique_ptr<RankGroup> group = load_local_ranks(file, adapters, setup);
        refuse_if_aborted();  // stopped while loading: the new ranks go again
        std::lock_guard<std::mutex> lock(group_mutex_);
        group_ = std::move(group);
    }

    bool asleep() const override {
        std::lock_guard<std::mutex> lock(group_mutex_);
        return !group_;
    }

    bool follower() const override { return options_.processes && options_.processes->rank() != 0; }

    void follow() override {
        if (!follower()) throw Error("follow() is for the processes that follow process 0");
        processes_group_->follow();
    }

    void decode(const Batch & batch) override {
        if (follower()) throw Error("only process 0 of the group decodes");
        require_awake();
        validate_batch(batch);
        Step step;
        KvPlacement placement;
        std::string why;
        if (!cells_->place(batch, placement, &why)) throw Error("KV cache full: " + why);
        step.batch = batch;
        if (batch.lora.empty()) {
            for (int i = 0; i < batch.size(); ++i) {
                for (const LoraOptions & l : options_.loras) step.batch.lora.push_back(l.scale);
            }
        }
        step.placement = placement.digest();
        step.edits.swap(pending_edits_);
        const std::vector<int32_t> rows = output_rows(batch);
        output_index_.assign(batch.size(), -1);
        for (size_t i = 0; i < rows.size(); ++i) {
            if (batch.want_logits[rows[i]]) output_index_[rows[i]] = (int32_t) i;
        }
        logits_.resize(rows.size() * (size_t) row_width());
        try {
            group_->run(step, logits_.data());
        } catch (...) {
            cells_->unplace(placement, /*stepped =*/true);
            throw;
        }
    }

    std::vector<uint8_t> read_sequence(int32_t seq, int32_t n) override {
        if (follower()) throw Error("only process 0 of the group reads sequences");
        require_awake();
        std::vector<int64_t> cells, window_cells;
        if (!cells_->cells_of(seq, n, cells, window_cells)) {
            throw Error("positions [0, " + std::to_string(n) + ") of sequence " + std::to_string(seq) +
                        " are not all cached");
        }
        if (cells_->states() && cells_->states()->next(seq) != n) {
            throw Error("the recurrent state of sequence " + std::to_string(seq) + " holds positions [0, " +
                        std::to_string(cells_->states()->next(seq)) + "), not [0, " + std::to_string(n) + ")");
        }
        Step step;
        step.kind = Step::Kind::Read;
        step.edits = pending_edits_;
        step.read_seq = seq;
        step.read_n = n;
        std::vector<uint8_t> image(image_layout(n).bytes());
        group_->read(step, image.data());
        pending_edits_.clear();  // every rank has applied them
        return image;
    }

    size_t sequence_image_bytes(int32_t n) const override { return image_layout(n).bytes(); }

    bool image_resumable(int32_t n, int32_t m) const override {
        // The window layers hold positions [n - keep, n); m reads [m - keep, m).
        // A recurrent state goes on only from where it is.
        const int32_t keep = kv_sizes_.window_keep;
        if (kv_sizes_.recurrent && m > 0 && m < n) return false;
        return !kv_sizes_.windowed() || m <= 0 || m >= n || n <= keep;
    }

    void write_sequence(int32_t seq, const std::vector<int32_t> & tokens, const std::vector<uint8_t> & image) override {
        if (follower()) throw Error("only process 0 of the group writes sequences");
        require_awake();
        if (seq < 0 || seq >= options_.n_seq_max) throw Error("sequence " + std::to_string(seq) + " out of range");
        const int32_t n = (int32_t) tokens.size();
        const KvImageLayout layout = image_layout(n);
        const KvImageLayout every_cell = KvImageLayout::of(hp_, options_.kv_types, n, -1);
        // An image of every cell loads into windows as its last cells.
        const bool cut = kv_sizes_.windowed() && image.size() == every_cell.bytes() && image.size() != layout.bytes();
        if (image.size() != layout.bytes() && !cut) {
            const bool windows =
                hp_.n_swa > 0 &&
                image.size() == KvImageLayout::of(hp_, options_.kv_types, n, std::max(0, hp_.n_swa - 1)).bytes();
            throw Error("a KV image of " + std::to_string(image.size()) + " bytes for " + std::to_string(n) +
                        " cells, not " + std::to_string(layout.bytes()) +
                        (windows ? " (it holds only the window of the sliding-window layers, which keep every "
                                   "cell here: --swa-full, or a context no larger than their window and a batch)"
                                 : ""));
        }
        seq_remove(seq, 0, -1);
        if (n == 0) return;  // the removal goes with the next step
        Batch batch;
        for (int32_t i = 0; i < n; ++i) batch.add(tokens[i], i, seq, false);
        validate_batch_tokens(batch);
        KvPlacement placement;
        std::string why;
        if (!cells_->place(batch, placement, &why, /*load =*/true)) {
            throw Error("no room for " + std::to_string(n) + " cells: " + why);
        }
        Step step;
        step.kind = Step::Kind::Load;
        step.batch = std::move(batch);
        step.placement = placement.digest();
        step.edits.swap(pending_edits_);
        step.kv = cut ? KvImageLayout::cut_to_window(every_cell, layout, image) : image;
        std::vector<float> unused(output_rows(step.batch).size() * (size_t) row_width());
        try {
            group_->run(step, unused.data());
        } catch (...) {
            cells_->unplace(placement, /*stepped =*/true);
            throw;
        }
    }

    const float * logits(int32_t batch_row) const override {
        if (options_.embeddings) throw Error("an engine loaded for embeddings has no logits");
        return output_row(batch_row);
    }

    const float * hidden(int32_t batch_row) const override {
        if (!options_.keep_hidden) throw Error("the engine was not loaded to keep hidden states");
        const std::vector<float> & rows = group_->hidden_rows();
        if (batch_row < 0 || (size_t) (batch_row + 1) * hp_.n_embd > rows.size()) {
            throw Error("batch row " + std::to_string(batch_row) + " is not a row of the last step");
        }
        return rows.data() + (size_t) batch_row * hp_.n_embd;
    }

    const float * embedding(int32_t batch_row) const override {
        if (!options_.embeddings) throw Error("the engine was not loaded for embeddings");
        return output_row(batch_row);
    }

    // Applied here now, and by every rank with the next step.
    void seq_remove(int32_t seq, int32_t p0, int32_t p1) override {
        cells_->seq_remove(seq, p0, p1);
        pending_edits_.push_back({seq, p0, p1, 0});
    }
    void seq_shift(int32_t seq, int32_t p0, int32_t p1, int32_t delta) override {
        if (delta == 0) return;
        cells_->seq_shift(seq, p0, p1, delta);
        pending_edits_.push_back({seq, p0, p1, delta});
    }
    bool seq_copy(int32_t src, int32_t seq, int32_t p0, int32_t p1) override {
        KvCopy copied;
        if (!cells_->seq_copy(src, seq, p0, p1, copied)) return false;
        pending_edits_.push_back({seq, p0, p1, 0, src});
        return true;
    }
    int32_t seq_pos_max(int32_t seq) const override { return cells_->seq_pos_max(seq); }
    bool seq_resumable(int32_t seq, int32_t n) const override { return cells_->resumable(seq, n); }
    bool can_rewind() const override { return !kv_sizes_.recurrent; }
    void seq_save_state(int32_t seq) override {
        if (cells_->save_state(seq).first < 0) return;
        KvEdit save;
        save.seq = seq;
        save.save_state = 1;
        pending_edits_.push_back(save);
    }
    bool can_take_back_drafts() const override { return can_rewind() || kv_sizes_.saved_states; }
    int32_t n_free_cells() const override { return cells_->n_free(); }
    const Tokenizer & tokenizer() const override { return *tokenizer_; }
    const ModelInfo & info() const override { return info_; }
    const ClassifierHead * classifier() const override { return head_ ? &*head_ : nullptr; }
    const EngineOptions & options() const override { return options_; }
    int64_t graph_builds() const override {
        std::lock_guard<std::mutex> lock(group_mutex_);
        return slept_graph_builds_ + (group_ ? group_->graph_builds() : 0);
    }
    std::vector<CollectiveStats> collective_stats() const override {
        std::lock_guard<std::mutex> lock(group_mutex_);
        return collective_stats_locked();
    }
    std::vector<uint64_t> rank_memory_bytes() const override {
        return rank_figures([](const RankReport & r) { return r.memory_bytes; });
    }
    std::vector<uint64_t> rank_weight_bytes() const override {
        return rank_figures([](const RankReport & r) { return r.weight_bytes; });
    }
    template <typename Figure>
    std::vector<uint64_t> rank_figures(const Figure & figure) const {
        std::lock_guard<std::mutex> lock(group_mutex_);
        std::vector<uint64_t> out(info_.tp, 0);  // asleep: none
        if (group_) {
            out.clear();
            for (const RankReport & r : group_->reports()) out.push_back(figure(r));
        }
        return out;
    }

  private:
    void require_awake() const {
        if (!group_) throw Error("the model is unloaded while the engine sleeps (wake() loads it again)");
    }

    // Since loading: the ranks' now, and those of the groups before a sleep.
    std::vector<CollectiveStats> collective_stats_locked() const {
        std::vector<CollectiveStats> out = slept_stats_;
        if (!group_) return out;
        const std::vector<CollectiveStats> now = group_->collective_stats();
        out.resize(std::max(out.size(), now.size()));
        for (size_t r = 0; r < now.size(); ++r) {
            out[r].calls += now[r].calls;
            out[r].seconds += now[r].seconds;
        }
        return out;
    }

    int32_t row_width() const { return options_.embeddings ? hp_.n_embd : hp_.n_vocab; }

    KvImageLayout image_layout(int32_t n) const {
        return KvImageLayout::of(hp_, options_.kv_types, n, kv_sizes_.window_keep);
    }

    void log_window_pool() const {
        if (!kv_sizes_.windowed() || follower()) return;
        std::fprintf(stderr,
                     "llama-tp: sliding-window layers keep %d cells (window %d, batch %d, %d sequences), not %d "
                     "(--swa-full keeps them all)\n",
                     kv_sizes_.window_cells, hp_.n_swa, options_.n_batch, options_.n_seq_max, options_.n_ctx);
    }

    const float * output_row(int32_t batch_row) const {
        if (batch_row < 0 || batch_row >= (int32_t) output_index_.size() || output_index_[batch_row] < 0) {
            throw Error("no output for batch row " + std::to_string(batch_row) + " (not requested)");
        }
        return logits_.data() + (size_t) output_index_[batch_row] * row_width();
    }

    void validate_options() {
        if (options_.tp < 1) throw Error("--tp must be at least 1");
        if (options_.n_ctx <= 0) options_.n_ctx = hp_.n_ctx_train;
        if (options_.n_seq_max < 1) throw Error("the number of sequences must be at least 1");
        if (options_.n_batch < 1) throw Error("the batch size must be at least 1");
        if (options_.loras.size() > 64) throw Error("at most 64 LoRA adapters");
        if (options_.embeddings && (options_.keep_hidden || options_.mtp_head)) {
            throw Error("an engine loaded for embeddings has no logits to draft with");
        }
        if (options_.n_threads <= 0) {
            // Processes of the group on one host share its cores.
            const int sharing = options_.processes ? options_.processes->local_size() : 1;
            options_.n_threads = (int32_t) std::max(1u, std::thread::hardware_concurrency() / sharing);
        }
        if (options_.n_threads < options_.tp) options_.n_threads = options_.tp;
        for (int il = 0; il < hp_.n_layer; ++il) {
            const int32_t head_dim = hp_.layer(il).head_dim;
            check_kv_type(options_.kv_types.k, head_dim, "the K");
            // Latent attention's values are its keys' first columns: no V cache.
            if (!hp_.block(il).attention.values_in_keys()) {
                check_kv_type(options_.kv_types.v, hp_.layer(il).v_dim(), "the V");
            }
        }
    }

    // The ranks' devices; the log says where they are when not on the CPU.
    void choose_devices(int first_gpu) {
        devices_ = choose_rank_devices(options_.devices, options_.tp, first_gpu, hp_.n_layer);
        const std::vector<ggml_backend_dev_t> & d = devices_.devices;
        const bool all_cpu = std::all_of(d.begin(), d.end(), [](ggml_backend_dev_t dev) {
            return ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU;
        });
        if (all_cpu && !options_.portable_graph) return;
        std::string names;
        for (ggml_backend_dev_t dev : d) names += (names.empty() ? "" : ", ") + std::string(ggml_backend_dev_name(dev));
        std::fprintf(stderr,
                     "llama-tp: ranks on %s (%s); their graphs use ggml's operations only (ggml's attention, "
                     "float sums)\n",
                     names.c_str(), devices_.why.c_str());
    }

    // The runtime plan for this process's ranks; the options then say what
    // was decided (Engine::options()).
    void resolve(const GgufFile & file) {
        PlanFacts facts;
        for (ggml_backend_dev_t dev : devices_.devices) {
            facts.devices.push_back({ggml_backend_dev_name(dev),
                                     ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU,
                                     physical_cuda_device(dev)});
        }
        facts.row_parallel_in_one_pass = ModelWeights::row_parallel_in_one_pass(file, hp_);
        // Faster where it is for every type of the model it takes.
        const std::vector<ggml_type> types = ModelWeights::one_pass_types(file);
        facts.one_pass_faster = !types.empty();
        for (ggml_type t : types) {
            facts.one_pass_faster = facts.one_pass_faster && ggml_ext_exact_matmul_preferred(t);
            if (!facts.one_pass_kernel.empty()) facts.one_pass_kernel += ", ";
            facts.one_pass_kernel += std::string(ggml_type_name(t)) + " " + ggml_ext_exact_matmul_kernel(t);
        }
        if (!options_.environment) options_.environment = Environment::of_process();
        runtime_ = resolve_runtime(options_, facts, *options_.environment);
        options_.split_invariant = runtime_.split_invariant;
        options_.one_pass_products = runtime_.one_pass_products;
        if (options_.processes && options_.processes->rank() != 0) return;
        for (const std::string & line : runtime_.log) std::fprintf(stderr, "%s\n", line.c_str());
    }

    // The engine that joins the ranks of the group's processes (the factory's
    // mpi, or nccl across them), and its log line.
    std::unique_ptr<AllReduceEngine> process_allreduce(ProcessGroup & processes) const {
        AllReduceConfig ac = runtime_.allreduce;
        ac.processes = &processes;
        const std::string name = normalized_engine_name(ac.engine);
        std::unique_ptr<AllReduceEngine> engine = make_allreduce_engine(ac);
        if (processes.rank() == 0) {
            std::fprintf(stderr, "llama-tp: allreduce engine %s (%s: %d ranks in %d processes, %d per process; %s)\n",
                         engine->name(), name == "auto" ? "auto" : "requested", options_.tp * processes.size(),
                         processes.size(), options_.tp, engine->joins().c_str());
        }
        return engine;
    }

    // The output-head rows each process's ranks hold together; with
    // embeddings process 0 holds whole rows and the others send none.
    // The KV heads each process's ranks hold together (replicated heads may
    // appear in two processes: they hold the same numbers), or of a
    // linear-attention layer the key heads whose states they hold.
    std::vector<std::vector<ShardRange>> process_kv_heads(int n_processes) const {
        std::vector<std::vector<ShardRange>> out(n_processes);
        for (int p = 0; p < n_processes; ++p) {
            const RankShard & first = plan_.ranks[p * options_.tp];
            const RankShard & last = plan_.ranks[(p + 1) * options_.tp - 1];
            for (int il = 0; il < hp_.n_layer; ++il) {
                out[p].push_back(hp_.keeps_kv(il)
                                     ? ShardRange{first.layers[il].kv_heads.begin, last.layers[il].kv_heads.end}
                                     : ShardRange{first.delta_heads.begin, last.delta_heads.end});
            }
        }
        return out;
    }

    std::vector<ShardRange> process_vocab(int n_processes) const {
        std::vector<ShardRange> out;
        if (options_.embeddings) {
            out.push_back({0, hp_.n_embd});
            for (int p = 1; p < n_processes; ++p) out.push_back({0, 0});
            return out;
        }
        for (int p = 0; p < n_processes; ++p) {
            out.push_back({plan_.ranks[p * options_.tp].vocab.begin, plan_.ranks[(p + 1) * options_.tp - 1].vocab.end});
        }
        return out;
    }

    void log_ranks(const RankSetup & setup, const ProcessGroup & processes, const std::vector<RankReport> & reports) {
        for (int i = 0; i < setup.n_local; ++i) {
            const RankShard & s = plan_.ranks[setup.first_rank + i];
            // Layer 0's dense FFN, or its experts' width.
            const ShardRange & ffn = s.layers[0].ff.width.size() ? s.layers[0].ff.width : s.layers[0].ff_exp.width;
            std::fprintf(stderr,
                         "llama-tp: rank %d of %d on %s: device %s, heads [%lld, %lld) (kv %lld), ffn [%lld, %lld), "
                         "vocab [%lld, %lld), %.1f MiB, allreduce mpi\n",
                         setup.first_rank + i, setup.n_ranks, processes.host().c_str(),
                         ggml_backend_dev_name(setup.devices[i]), (long long) s.q_heads.begin,
                         (long long) s.q_heads.end, (long long) s.first_kv_heads().size(), (long long) ffn.begin,
                         (long long) ffn.end, (long long) s.vocab.begin, (long long) s.vocab.end,
                         reports[i].memory_bytes / 1048576.0);
        }
    }

    static std::unique_ptr<GgufFile> open_adapter(const std::string & path) {
        try {
            return std::make_unique<GgufFile>(path);
        } catch (const Error & e) {
            throw Error("LoRA adapter: " + std::string(e.what()));
        }
    }

    ControlVector load_control_vector() const {
        if (!options_.control_vectors.empty() && options_.control_range.first > 0 && options_.control_range.last > 0 &&
            options_.control_range.first > options_.control_range.last) {
            throw Error("control vector layer range " + std::to_string(options_.control_range.first) + " to " +
                        std::to_string(options_.control_range.last) + " is empty");
        }
        ControlVector cv(options_.control_vectors, hp_.n_layer, hp_.n_embd, options_.control_range);
        if (!options_.control_vectors.empty()) std::fprintf(stderr, "llama-tp: %s\n", cv.describe().c_str());
        return cv;
    }

    void validate_batch(const Batch & batch) const {
        const int n = batch.size();
        if (n == 0) throw Error("empty batch");
        if (!batch.lora.empty() && batch.lora.size() != (size_t) n * options_.loras.size()) {
            throw Error("batch has " + std::to_string(batch.lora.size()) + " LoRA scales for " + std::to_string(n) +
                        " tokens and " + std::to_string(options_.loras.size()) + " adapters");
        }
        if (n > options_.n_batch) {
            throw Error("batch of " + std::to_string(n) + " tokens exceeds the batch size " +
                        std::to_string(options_.n_batch));
        }
        const size_t n_embd = options_.mtp_head ? (size_t) n * hp_.n_embd : 0;
        if (batch.embd.size() != n_embd) {
            throw Error("batch has " + std::to_string(batch.embd.size()) + " hidden-state values for " +
                        std::to_string(n) + " tokens; " +
                        (options_.mtp_head
                             ? "a multi-token-prediction head takes " + std::to_string(hp_.n_embd) + " per token"
                             : std::string("only a multi-token-prediction head takes them")));
        }
        validate_batch_tokens(batch);
    }

    // Tokens, sequences and positions in range (any batch size).
    void validate_batch_tokens(const Batch & batch) const {
        const int n = batch.size();
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

    void fill_info(const GgufFile & file) {
        info_ = describe_model(file, hp_, options_, cells_->all().n_cells_per_seq());
        // Per rank figures summed; mirrored tensors count once per rank.
        for (const RankReport & r : group_->reports()) {
            info_.n_params += r.n_params;
            info_.weight_bytes += r.weight_bytes;
        }
        info_.tp = group_->n_ranks();
        info_.allreduce = group_->allreduce_name();
        info_.allreduce_bf16 = group_->allreduce_rounds_to_bf16();
        info_.shard_plan = info_.tp > 1 ? plan_.describe() : "";
        info_.split_tiled = info_.tp == 1 || plan_.tiled(hp_);
    }

    EngineOptions options_;
    HParams hp_;
    ModelInfo info_;
    std::optional<ClassifierHead> head_;
    ShardPlan plan_;
    std::unique_ptr<Tokenizer> tokenizer_;
    RankDevices devices_;  // of this process's ranks
    RuntimePlan runtime_;  // what they do, resolved at load
    KvPoolSizes kv_sizes_;
    std::unique_ptr<KvPools> cells_;
    std::vector<KvEdit> pending_edits_;
    // Null while asleep. Replaced only by the owning thread (sleep, wake),
    // under group_mutex_, which the calls safe from any thread take.
    std::unique_ptr<RankGroup> group_;
    mutable std::mutex group_mutex_;
    std::string aborted_;                       // abort()'s reason, kept while asleep
    std::string loaded_from_;                   // the files the ranks were loaded from (load_local_ranks)
    std::vector<CollectiveStats> slept_stats_;  // of the groups before a sleep
    int64_t slept_graph_builds_ = 0;
    MpiRankGroup * processes_group_ = nullptr;  // group_, when it spans processes
    std::vector<float> logits_;
    std::vector<int32_t> output_index_;
};

}  // namespace

bool ggml_graphs_off_for_capture(const Environment & env) {
    return graph_capture_asked(env);
}

std::unique_ptr<Engine> Engine::load(const EngineOptions & options) {
    return std::make_unique<TensorParallelEngine>(options);
}

}  // namespace llama_tp
