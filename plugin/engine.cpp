#include "plugin/engine.h"

#include "plugin/error.h"
#include "plugin/gguf_file.h"
#include "plugin/hparams.h"
#include "plugin/kv_cache.h"
#include "plugin/llama_graph.h"
#include "plugin/tokenizer.h"
#include "plugin/weights.h"

#include <algorithm>
#include <thread>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "ggml-cpu.h"
#include "ggml.h"

namespace llama_tp {

namespace {

constexpr size_t kMaxGraphNodes = 8192;

ggml_backend_dev_t cpu_device() {
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!dev) throw Error("no CPU backend device is available");
    return dev;
}

std::string file_name_of(const std::string & path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// One built graph: its tensor context, the graph, its inputs and its output.
struct GraphCache {
    ggml_context_ptr ctx;
    ggml_cgraph * gf = nullptr;
    GraphShape shape;
    GraphInputs in;
    ggml_tensor * logits = nullptr;

    void reset() { *this = GraphCache{}; }
};

class SingleDeviceEngine final : public Engine {
  public:
    explicit SingleDeviceEngine(const EngineOptions & options) : options_(options) {
        GgufFile file(options.model_path);
        hp_ = read_hparams(file);
        tokenizer_ = std::make_unique<Tokenizer>(options.model_path);
        if (tokenizer_->n_vocab() != hp_.n_vocab) {
            throw Error("model file '" + options.model_path + "': vocabulary has " +
                        std::to_string(tokenizer_->n_vocab()) + " tokens but token_embd.weight has " +
                        std::to_string(hp_.n_vocab) + " rows");
        }
        validate_options();
        device_ = cpu_device();
        weights_ = std::make_unique<ModelWeights>(file, hp_, device_, options.progress);
        backend_.reset(ggml_backend_dev_init(device_, nullptr));
        if (!backend_) throw Error("could not initialise the CPU backend");
        ggml_backend_cpu_set_n_threads(backend_.get(), options_.n_threads);
        kv_ = std::make_unique<KvCache>(hp_, hp_.n_head_kv, options_.n_ctx, options_.n_seq_max,
                                        ggml_backend_dev_buffer_type(device_));
        allocator_.reset(ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_.get())));
        fill_info(file);
    }


    void decode(const Batch & batch) override {
        validate_batch(batch);
        std::vector<int64_t> cells;
        if (!kv_->place(batch, cells)) {
            throw Error("KV cache full: the batch needs " + std::to_string(batch.size()) + " cells, " +
                        std::to_string(kv_->n_free()) + " are free (context " + std::to_string(kv_->n_cells()) +
                        ")");
        }
        try {
            run(batch, cells);
        } catch (...) {
            kv_->unplace(cells);
            throw;
        }
    }

    const float * logits(int32_t batch_row) const override {
        if (batch_row < 0 || batch_row >= (int32_t) output_index_.size() || output_index_[batch_row] < 0) {
            throw Error("no logits for batch row " + std::to_string(batch_row) + " (not requested)");
        }
        return logits_.data() + (size_t) output_index_[batch_row] * hp_.n_vocab;
    }

    void seq_remove(int32_t seq, int32_t p0, int32_t p1) override { kv_->seq_remove(seq, p0, p1); }
    int32_t seq_pos_max(int32_t seq) const override { return kv_->seq_pos_max(seq); }
    int32_t n_free_cells() const override { return kv_->n_free(); }
    const Tokenizer & tokenizer() const override { return *tokenizer_; }
    const ModelInfo & info() const override { return info_; }
    const EngineOptions & options() const override { return options_; }
    int64_t graph_builds() const override { return graph_builds_; }

  private:
    void validate_options() {
        if (options_.tp != 1) {
            throw Error("tensor parallelism (--tp " + std::to_string(options_.tp) +
                        ") is not available in this build yet; use --tp 1");
        }
        if (options_.n_ctx <= 0) options_.n_ctx = hp_.n_ctx_train;
        if (options_.n_seq_max < 1) throw Error("the number of sequences must be at least 1");
        if (options_.n_batch < 1) throw Error("the batch size must be at least 1");
        if (options_.n_threads <= 0) options_.n_threads = (int32_t) std::max(1u, std::thread::hardware_concurrency());
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

    void ensure_graph(const GraphShape & shape) {
        if (graph_.gf && graph_.shape == shape) return;
        graph_.reset();
        ggml_init_params params = {kMaxGraphNodes * ggml_tensor_overhead() + ggml_graph_overhead_custom(kMaxGraphNodes, false),
                                   nullptr, true};
        graph_.ctx.reset(ggml_init(params));
        if (!graph_.ctx) throw Error("out of memory building the graph");
        graph_.gf = ggml_new_graph_custom(graph_.ctx.get(), kMaxGraphNodes, false);
        graph_.shape = shape;
        graph_.logits = build_llama_graph(graph_.ctx.get(), graph_.gf, hp_, *weights_, *kv_, shape, graph_.in);
        if (!ggml_gallocr_alloc_graph(allocator_.get(), graph_.gf)) {
            graph_.reset();
            throw Error("out of memory allocating the compute buffer");
        }
        ++graph_builds_;
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
        if (out_rows.empty()) {
            // The graph always produces at least one row; nobody reads it.
            out_rows.push_back(n - 1);
        }
        const GraphShape shape{n, (int32_t) out_rows.size(), kv_->window()};
        ensure_graph(shape);

        mask_.resize((size_t) shape.window * n);
        kv_->fill_mask(batch, shape.window, mask_.data());
        const GraphInputs & in = graph_.in;
        ggml_backend_tensor_set(in.tokens, batch.tokens.data(), 0, n * sizeof(int32_t));
        ggml_backend_tensor_set(in.positions, batch.pos.data(), 0, n * sizeof(int32_t));
        ggml_backend_tensor_set(in.kv_cells, cells.data(), 0, n * sizeof(int64_t));
        ggml_backend_tensor_set(in.kq_mask, mask_.data(), 0, mask_.size() * sizeof(ggml_fp16_t));
        ggml_backend_tensor_set(in.out_rows, out_rows.data(), 0, out_rows.size() * sizeof(int32_t));

        const ggml_status status = ggml_backend_graph_compute(backend_.get(), graph_.gf);
        if (status != GGML_STATUS_SUCCESS) {
            throw Error(std::string("graph compute failed: ") + ggml_status_to_string(status));
        }
        logits_.resize((size_t) out_rows.size() * hp_.n_vocab);
        ggml_backend_tensor_get(graph_.logits, logits_.data(), 0, logits_.size() * sizeof(float));
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
        info_.n_params = weights_->n_params();
        info_.weight_bytes = weights_->total_bytes();
    }

    EngineOptions options_;
    HParams hp_;
    ModelInfo info_;
    std::unique_ptr<Tokenizer> tokenizer_;
    ggml_backend_dev_t device_ = nullptr;
    std::unique_ptr<ModelWeights> weights_;
    ggml_backend_ptr backend_;
    std::unique_ptr<KvCache> kv_;
    ggml_gallocr_ptr allocator_;
    GraphCache graph_;
    int64_t graph_builds_ = 0;
    std::vector<ggml_fp16_t> mask_;
    std::vector<float> logits_;
    std::vector<int32_t> output_index_;
};

}  // namespace

std::unique_ptr<Engine> Engine::load(const EngineOptions & options) {
    return std::make_unique<SingleDeviceEngine>(options);
}

}  // namespace llama_tp
