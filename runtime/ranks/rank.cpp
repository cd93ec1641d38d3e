#include "runtime/ranks/rank.h"

#include "runtime/kv/kv_image.h"
#include "runtime/ranks/rank_devices.h"

#include "runtime/error.h"
#include "runtime/model/gguf_file.h"
#include "runtime/shard/shard_plan.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#include "ggml-alloc.h"
#include "ggml.h"

namespace llama_tp {

namespace {

// Graph nodes: a fixed budget for the layers plus a few per attention run,
// and per piece of a row-parallel matrix, and layer.
size_t max_graph_nodes(const HParams & hp, const GraphShape & shape, const RankShard & shard, size_t n_adapters) {
    const size_t pieces = std::max<size_t>(3, shard.max_pieces());
    // A LoRA pair takes a few nodes, a row-parallel one's A a product per cell.
    const size_t lora = n_adapters * 7 * (pieces + 6);
    // A run of attention takes up to 9 nodes (row attention: its partials, then the rows).
    // A run of linear attention about 45.
    const size_t runs = std::max(shape.runs.size() * 10, shape.window_runs.size() * 10) + shape.state_runs.size() * 50;
    return 8192 + (size_t) hp.n_layer * (runs + pieces * 8 + lora);
}

// The exact sums' kernels (split-invariant sums, the embedding rows' assembly)
// for a rank whose graph cannot run ggml-ext's custom operations on its
// device: on a CUDA GPU our own kernels; elsewhere (null) the segment executor
// adds on the host.
std::unique_ptr<ExactSumKernels> exact_sum_kernels(ggml_backend_dev_t device, const RankConfig & config) {
    if (config.collectives == CollectivePath::InGraph || config.collectives == CollectivePath::ThroughHost) {
        return nullptr;
    }
#if defined(LLAMA_TP_HAVE_CUDA)
    const int gpu = physical_cuda_device(device);
    if (gpu >= 0) return make_cuda_exact_sum_kernels(gpu);
#else
    (void) device;
#endif
    return nullptr;
}

// The stream work of a rank whose collectives run on its GPU's stream
// (CollectivePath::OnStream): a bridge to the stream, and for
// CollectivePath::Captured the capture of whole steps. GPU builds only.
struct StreamWork {
    std::unique_ptr<StreamBridge> bridge;
    std::unique_ptr<StepCapture> capture;
};
StreamWork stream_work(ggml_backend_t backend, ggml_backend_dev_t device, const RankConfig & config) {
    StreamWork work;
    const bool captured = config.collectives == CollectivePath::Captured;
    if (config.collectives != CollectivePath::OnStream && !captured) return work;
#if defined(LLAMA_TP_HAVE_CUDA)
    const int gpu = physical_cuda_device(device);
    if (gpu < 0) return work;
    work.bridge = make_cuda_stream_bridge(backend, gpu);
    if (captured) work.capture = make_cuda_step_capture(backend, gpu);
#else
    (void) backend;
    (void) device;
#endif
    return work;
}

// Bit i: some token of the batch has a nonzero scale for adapter i.
uint64_t active_adapters(const Batch & batch, size_t n_adapters) {
    uint64_t bits = 0;
    for (size_t i = 0; i < batch.lora.size(); ++i) {
        if (batch.lora[i] != 0.0f) bits |= uint64_t(1) << (i % n_adapters);
    }
    return bits;
}

}  // namespace

Rank::Rank(const GgufFile & file, const HParams & hp, const RankConfig & config) : hp_(hp), config_(config) {
    ggml_backend_dev_t device = config.device;
    if (!device) throw Error("rank " + std::to_string(config.rank) + " has no backend device");
    if (!config.shard) throw Error("rank " + std::to_string(config.rank) + " has no share of the model");
    WeightsLoad load;
    load.shard = config.shard;
    load.split_invariant = config.split_invariant;
    load.one_pass_products = config.one_pass_products;
    load.ops = config.ops;
    load.device = device;
    load.progress = config.progress;
    load.check_data = config.check_tensors;
    load.adapters = config.adapters;
    weights_ = std::make_unique<ModelWeights>(file, hp, load);
    config_.adapters.clear();  // open for the load only
    if (config.control) weights_->add_control_vector(*config.control);
    config_.control = nullptr;
    vocab_begin_ = config.shard->vocab.begin;
    backend_.reset(ggml_backend_dev_init(device, nullptr));
    if (!backend_) {
        throw Error("could not initialise backend device " + std::string(ggml_backend_dev_name(device)) + " for rank " +
                    std::to_string(config.rank));
    }
    if (ggml_backend_is_cpu(backend_.get())) {
        // A persistent pool: no thread creation per decode step. With several
        // ranks (or engines) sharing the cores its threads must not poll
        // between graphs.
        ggml_threadpool_params tpp = ggml_threadpool_params_default(config.n_threads);
        tpp.poll = config.n_ranks > 1 || !config.threads_poll ? 0 : 50;
        threadpool_ = ggml_threadpool_new(&tpp);
        if (!threadpool_) throw Error("could not create a thread pool for rank " + std::to_string(config.rank));
        ggml_backend_cpu_set_threadpool(backend_.get(), threadpool_);
        ggml_backend_cpu_set_n_threads(backend_.get(), config.n_threads);
    }
    std::vector<int32_t> n_kv;
    for (int il = 0; il < hp.n_layer; ++il) {
        n_kv.push_back((int32_t) config.shard->layers[il].kv_heads.size());
    }
    kv_ = std::make_unique<KvCache>(hp, n_kv, config.kv_sizes, config.kv_types, ggml_backend_dev_buffer_type(device),
                                    (int32_t) config.shard->delta_heads.size());
    allocator_.reset(ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_.get())));
    StreamWork stream = stream_work(backend_.get(), device, config);
    executor_ = std::make_unique<SegmentExecutor>(
        backend_.get(),
        config.collectives == CollectivePath::ThroughHost ? CollectiveRun::SegmentsThroughHost : CollectiveRun::Auto,
        config.allreduce && config.allreduce->takes_device_memory(), exact_sum_kernels(device, config),
        std::move(stream.bridge), std::move(stream.capture));
    if (config.allreduce) executor_->replay_only_while([engine = config.allreduce] { return !engine->failed(); });
}

Rank::~Rank() {
    graph_ctx_.reset();
    backend_.reset();
    if (threadpool_) ggml_threadpool_free(threadpool_);
}

// A call queued on a stream is counted, its time is the stream's.
template <typename T>
void Rank::timed_allreduce(T * data, size_t n, void * stream) {
    if (stream) {
        config_.allreduce->allreduce_on_stream(config_.rank, data, n, stream);
        collective_calls_.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    config_.allreduce->allreduce(config_.rank, data, n);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    collective_calls_.fetch_add(1, std::memory_order_relaxed);
    collective_ns_.fetch_add(ns.count(), std::memory_order_relaxed);
}

// stream: queued there (the segment executor's bridge), else summed now.
void Rank::allreduce_callback(void * user, void * data, ggml_type type, size_t n, void * stream) {
    Rank * rank = static_cast<Rank *>(user);
    if (type == GGML_TYPE_F64) {
        rank->timed_allreduce(static_cast<double *>(data), n, stream);
    } else {
        rank->timed_allreduce(static_cast<float *>(data), n, stream);
    }
}

void Rank::apply_edits(const std::vector<KvEdit> & edits) {
    for (const KvEdit & e : edits) {
        if (e.src >= 0) {
            KvCopy copied;
            if (!kv_->seq_copy(e.src, e.seq, e.p0, e.p1, copied)) {
                throw Error("rank " + std::to_string(config_.rank) +
                            ": KV cache differs from rank 0's: no room to copy "
                            "sequence " +
                            std::to_string(e.src) + " into " + std::to_string(e.seq));
            }
            copy_cells(copied);
        } else if (e.save_state) {
            copy_state_row(kv_->save_state(e.seq));
        } else if (e.delta == 0) {
            copy_state_row(kv_->seq_remove(e.seq, e.p0, e.p1));
        } else {
            rotate_keys(kv_->seq_shift(e.seq, e.p0, e.p1, e.delta), e.delta);
        }
    }
}

// Every linear-attention layer's state row `rows.first` into row
// `rows.second` (none where first < 0), through host memory.
void Rank::copy_state_row(std::pair<int32_t, int32_t> rows) {
    if (rows.first < 0) return;
    std::vector<uint8_t> row;
    for (int il = 0; il < hp_.n_layer; ++il) {
        for (ggml_tensor * t : {kv_->conv_state(il), kv_->delta_state(il)}) {
            if (!t) continue;
            if (ggml_backend_buffer_is_host(t->buffer)) {  // one copy, not two (every checked draft)
                uint8_t * data = static_cast<uint8_t *>(t->data);
                std::memcpy(data + (size_t) rows.second * t->nb[1], data + (size_t) rows.first * t->nb[1], t->nb[1]);
                continue;
            }
            row.resize(t->nb[1]);
            ggml_backend_tensor_get(t, row.data(), (size_t) rows.first * t->nb[1], t->nb[1]);
            ggml_backend_tensor_set(t, row.data(), (size_t) rows.second * t->nb[1], t->nb[1]);
        }
    }
}

// Every layer's key and value rows of each (from, to) pair of its pool,
// through host memory (any backend's buffers).
void Rank::copy_cells(const KvCopy & copied) {
    kv_->move(copied.moves);
    copy_state_row(copied.states);
    std::vector<uint8_t> row;
    for (int il = 0; il < hp_.n_layer_kv(); ++il) {
        if (!hp_.keeps_kv(il)) continue;
        for (ggml_tensor * t : {kv_->k(il), kv_->v(il)}) {
            if (!t) continue;  // latent attention: keys only
            const size_t bytes = t->nb[1];
            row.resize(bytes);
            for (const auto & [from, to] : kv_->windowed(il) ? copied.window_cells : copied.cells) {
                ggml_backend_tensor_get(t, row.data(), (size_t) from * bytes, bytes);
                ggml_backend_tensor_set(t, row.data(), (size_t) to * bytes, bytes);
            }
        }
    }
}

// A graph of its own (shifts are rare), so the decode graph stays as it is.
void Rank::rotate_keys(const KvShifted & shifted, int32_t delta) {
    if (shifted.cells.empty() && shifted.window_cells.empty()) return;
    const size_t n_nodes = 8 * (size_t) hp_.n_layer + 16;
    ggml_init_params params = {ggml_tensor_overhead() * n_nodes + ggml_graph_overhead_custom(n_nodes, false), nullptr,
                               /*no_alloc =*/true};
    ggml_context_ptr ctx(ggml_init(params));
    if (!ctx) throw Error("out of memory building a key rotation");
    ggml_cgraph * gf = ggml_new_graph_custom(ctx.get(), n_nodes, false);
    // Per pool: the rows to rotate (get_rows takes I32) and by how much.
    struct Rows {
        const std::vector<int64_t> & cells;
        ggml_tensor *idx = nullptr, *shift = nullptr;
    };
    Rows pools[2] = {{shifted.cells}, {shifted.window_cells}};
    for (Rows & p : pools) {
        if (p.cells.empty()) continue;
        p.idx = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I32, (int64_t) p.cells.size());
        p.shift = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I32, (int64_t) p.cells.size());
        ggml_set_input(p.idx);
        ggml_set_input(p.shift);
    }
    build_key_shift_graph(ctx.get(), gf, hp_, *weights_, *kv_, KeyShift{pools[0].idx, pools[0].shift},
                          KeyShift{pools[1].idx, pools[1].shift});
    ggml_gallocr_ptr alloc(ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_.get())));
    if (!ggml_gallocr_alloc_graph(alloc.get(), gf)) {
        throw Error("out of memory rotating keys on rank " + std::to_string(config_.rank));
    }
    for (const Rows & p : pools) {
        if (!p.idx) continue;
        const std::vector<int32_t> rows(p.cells.begin(), p.cells.end());
        ggml_backend_tensor_set(p.idx, rows.data(), 0, rows.size() * sizeof(int32_t));
        const std::vector<int32_t> deltas(rows.size(), delta);
        ggml_backend_tensor_set(p.shift, deltas.data(), 0, rows.size() * sizeof(int32_t));
    }
    if (ggml_backend_graph_compute(backend_.get(), gf) != GGML_STATUS_SUCCESS) {
        throw Error("rotating keys failed on rank " + std::to_string(config_.rank));
    }
}

KvPlacement Rank::place(const Step & step) {
    apply_edits(step.edits);
    KvPlacement placement;
    std::string why;
    const std::string who = "rank " + std::to_string(config_.rank);
    if (!kv_->place(step.batch, placement, &why, step.kind == Step::Kind::Load)) {
        throw Error(who + ": KV cache differs from rank 0's: " + why);
    }
    kv_->move(placement.moves);
    if (placement.digest() != step.placement) {
        kv_->unplace(placement);
        throw Error(who + ": KV cache differs from rank 0's: the batch went to other cells");
    }
    return placement;
}

void Rank::run(const Step & step, float * logits, int32_t n_vocab) {
    const KvPlacement placement = place(step);
    if (step.kind == Step::Kind::Load) {
        try {
            load(step, placement);
        } catch (...) {
            kv_->unplace(placement, /*stepped =*/true);
            throw;
        }
        return;
    }
    try {
        const Batch & batch = step.batch;
        const std::vector<int32_t> out_rows = output_rows(batch);
        GraphShape shape{batch.size(), (int32_t) out_rows.size(), kv_->all().attention_runs(batch), {}, 0, {}};
        if (kv_->window()) shape.window_runs = kv_->window()->attention_runs(batch);
        if (!weights_->loras.empty()) shape.lora_active = active_adapters(batch, weights_->loras.size());
        shape.state_runs = placement.states.runs;
        fill_masks(batch, shape);
        clear_new_states(placement.states);
        prepare(batch, placement, out_rows, shape);
        compute();
        copy_logits(logits, n_vocab);
        if (hidden_ && config_.rank == 0) {
            hidden_rows_.resize((size_t) ggml_nelements(hidden_));
            ggml_backend_tensor_get(hidden_, hidden_rows_.data(), 0, ggml_nbytes(hidden_));
        }
    } catch (...) {
        kv_->unplace(placement, /*stepped =*/true);
        throw;
    }
}

// Sliding-window layers read a mask of their own: over the window pool's
// runs, or over the full pool's with the window applied, in the same pass.
void Rank::fill_masks(const Batch & batch, const GraphShape & shape) {
    const KvCells * window = kv_->window();
    mask_.resize(GraphShape::mask_size(shape.runs));
    mask_swa_.resize(hp_.n_swa > 0 ? GraphShape::mask_size(shape.swa_runs()) : 0);
    const bool swa_in_pass = hp_.n_swa > 0 && !window;
    size_t offset = 0;
    for (const AttentionRun & r : shape.runs) {
        kv_->all().fill_mask(batch, r, mask_.data() + offset, swa_in_pass ? mask_swa_.data() + offset : nullptr,
                             hp_.n_swa);
        offset += (size_t) r.window * r.size();
    }
    if (!window) return;
    offset = 0;
    for (const AttentionRun & r : shape.window_runs) {
        window->fill_mask(batch, r, nullptr, mask_swa_.data() + offset, hp_.n_swa);
        offset += (size_t) r.window * r.size();
    }
}

void Rank::copy_heads(const std::vector<int64_t> & cells, const std::vector<int64_t> & window_cells, uint8_t * image,
                      bool to_image) {
    const KvImageLayout layout = KvImageLayout::of(hp_, kv_->types(), (int32_t) cells.size(), kv_->sizes().window_keep);
    for (int il = 0; il < hp_.n_layer_kv(); ++il) {
        if (!hp_.keeps_kv(il)) continue;
        const std::vector<int64_t> & own = kv_->windowed(il) ? window_cells : cells;
        const ShardRange heads = config_.shard->layers[il].kv_heads;
        const int32_t h0 = (int32_t) heads.begin;
        for (const bool values : {false, true}) {
            ggml_tensor * t = values ? kv_->v(il) : kv_->k(il);
            if (!t) continue;  // latent attention: keys only
            const size_t size = layout.layers[il].head_bytes(values) * (size_t) heads.size();
            for (size_t i = 0; i < own.size(); ++i) {
                uint8_t * at = image + layout.offset(il, values, (int32_t) i, h0);
                const size_t cell = (size_t) own[i] * t->nb[1];
                if (to_image) {
                    ggml_backend_tensor_get(t, at, cell, size);
                } else {
                    ggml_backend_tensor_set(t, at, cell, size);
                }
            }
        }
    }
}

void Rank::copy_states(const KvImageLayout & layout, int32_t seq, uint8_t * image, bool to_image) {
    const ShardRange & k = config_.shard->delta_heads;
    for (size_t s = 0; s < layout.states.size(); ++s) {
        const int il = layout.states[s].il;
        for (const bool delta : {false, true}) {
            ggml_tensor * t = delta ? kv_->delta_state(il) : kv_->conv_state(il);
            size_t at = (size_t) seq * t->nb[1];
            for (const auto & [offset, bytes] : delta ? layout.delta_spans(s, k) : layout.conv_spans(s, k)) {
                if (to_image) {
                    ggml_backend_tensor_get(t, image + offset, at, bytes);
                } else {
                    ggml_backend_tensor_set(t, image + offset, at, bytes);
                }
                at += bytes;
            }
        }
    }
}

void Rank::load(const Step & step, const KvPlacement & placement) {
    const int32_t n = (int32_t) placement.cells.size();
    const size_t expected = KvImageLayout::of(hp_, kv_->types(), n, kv_->sizes().window_keep).bytes();
    if (step.kv.size() != expected) {
        throw Error("rank " + std::to_string(config_.rank) + ": a KV image of " + std::to_string(step.kv.size()) +
                    " bytes for " + std::to_string(n) + " cells, not " + std::to_string(expected));
    }
    copy_heads(placement.cells, placement.window_cells, const_cast<uint8_t *>(step.kv.data()), false);
    if (n > 0) {
        const KvImageLayout layout = KvImageLayout::of(hp_, kv_->types(), n, kv_->sizes().window_keep);
        copy_states(layout, step.batch.seq[0], const_cast<uint8_t *>(step.kv.data()), false);
    }
}

void Rank::read(const Step & step, uint8_t * image) {
    apply_edits(step.edits);
    std::vector<int64_t> cells, window_cells;
    if (!kv_->cells_of(step.read_seq, step.read_n, cells, window_cells)) {
        throw Error("rank " + std::to_string(config_.rank) + ": positions [0, " + std::to_string(step.read_n) +
                    ") of sequence " + std::to_string(step.read_seq) + " are not all cached");
    }
    copy_heads(cells, window_cells, image, true);
    if (kv_->states() && kv_->states()->next(step.read_seq) != step.read_n) {
        throw Error("rank " + std::to_string(config_.rank) + ": the recurrent state of sequence " +
                    std::to_string(step.read_seq) + " has not taken in exactly positions [0, " +
                    std::to_string(step.read_n) + ")");
    }
    const KvImageLayout layout = KvImageLayout::of(hp_, kv_->types(), step.read_n, kv_->sizes().window_keep);
    copy_states(layout, step.read_seq, image, true);
}

// A sequence that starts has zeros for states: its rows are cleared before
// the step (whatever an earlier sequence left there, a NaN included), so the
// graph reads every row as it is.
void Rank::clear_new_states(const StatePlacement & states) {
    for (size_t i = 0; i < states.rows.size(); ++i) {
        if (states.keep[i] != 0.0f) continue;
        for (int il = 0; il < hp_.n_layer; ++il) {
            for (ggml_tensor * t : {kv_->conv_state(il), kv_->delta_state(il)}) {
                if (t) ggml_backend_tensor_memset(t, 0, (size_t) states.rows[i] * t->nb[1], t->nb[1]);
            }
        }
    }
}

void Rank::prepare(const Batch & batch, const KvPlacement & placement, const std::vector<int32_t> & out_rows,
                   const GraphShape & shape) {
    if (!graph_ || !(shape_ == shape)) {
        graph_ctx_.reset();
        const size_t n_nodes = max_graph_nodes(hp_, shape, *config_.shard, weights_->loras.size());
        ggml_init_params params = {n_nodes * ggml_tensor_overhead() + ggml_graph_overhead_custom(n_nodes, false),
                                   nullptr, true};
        graph_ctx_.reset(ggml_init(params));
        if (!graph_ctx_) throw Error("out of memory building the graph");
        graph_ = ggml_new_graph_custom(graph_ctx_.get(), n_nodes, false);
        shape_ = shape;
        const Collective reduce{allreduce_callback, this};
        GraphMode mode;
        mode.reduce = config_.n_ranks > 1 ? &reduce : nullptr;
        mode.split_invariant = config_.split_invariant;
        mode.embeddings = config_.embeddings;
        mode.keep_hidden = config_.keep_hidden;
        mode.ops = config_.ops;
        const GraphOutputs out =
            build_decoder_graph(graph_ctx_.get(), graph_, hp_, *weights_, *kv_, shape, inputs_, mode);
        logits_ = out.logits;
        hidden_ = out.hidden;
        if (!ggml_gallocr_alloc_graph(allocator_.get(), graph_)) {
            graph_ = nullptr;
            throw Error("out of memory allocating the compute buffer of rank " + std::to_string(config_.rank));
        }
        graph_builds_++;
    }
    const int n = batch.size();
    set_input(inputs_.tokens, batch.tokens.data(), n * sizeof(int32_t));
    set_input(inputs_.positions, batch.pos.data(), n * sizeof(int32_t));
    set_input(inputs_.kv_cells, placement.cells.data(), n * sizeof(int64_t));
    set_input(inputs_.kv_cells_swa, placement.window_cells.data(), n * sizeof(int64_t));
    set_input(inputs_.kq_mask, mask_.data(), mask_.size() * sizeof(ggml_fp16_t));
    set_input(inputs_.kq_mask_swa, mask_swa_.data(), mask_swa_.size() * sizeof(ggml_fp16_t));
    set_input(inputs_.out_rows, out_rows.data(), out_rows.size() * sizeof(int32_t));
    set_input(inputs_.state_rows, placement.states.rows.data(), placement.states.rows.size() * sizeof(int32_t));
    if (inputs_.hidden && batch.embd.size() != (size_t) n * hp_.n_embd) {
        throw Error("rank " + std::to_string(config_.rank) + ": a step of " + std::to_string(n) + " tokens carries " +
                    std::to_string(batch.embd.size()) + " hidden-state values, not " + std::to_string(n) + " x " +
                    std::to_string(hp_.n_embd));
    }
    set_input(inputs_.hidden, batch.embd.data(), batch.embd.size() * sizeof(float));
    if (inputs_.embd_rows) {
        std::vector<int32_t> rows(n);
        std::vector<float> inside(n);
        const int64_t v0 = vocab_begin_, v1 = vocab_begin_ + weights_->tok_embd->ne[1];
        for (int i = 0; i < n; ++i) {
            inside[i] = batch.tokens[i] >= v0 && batch.tokens[i] < v1 ? 1.0f : 0.0f;
            rows[i] = inside[i] != 0.0f ? (int32_t) (batch.tokens[i] - v0) : 0;
        }
        set_input(inputs_.embd_rows, rows.data(), n * sizeof(int32_t));
        set_input(inputs_.embd_mask, inside.data(), n * sizeof(float));
    }
    if (shape.lora_active) fill_lora_scales(batch);
}

// A graph input, where the graph reads it: an input no node uses gets no
// memory (the global layers' mask in a model whose layers all slide, the
// scales of an adapter no pair of the batch needs).
void Rank::set_input(ggml_tensor * t, const void * data, size_t bytes) {
    if (t && t->buffer) ggml_backend_tensor_set(t, data, 0, bytes);
}

// Each token's scale of every adapter's pairs, as upstream's scale:
// (user scale * alpha) / rank, or the user scale alone where alpha is 0.
void Rank::fill_lora_scales(const Batch & batch) {
    const size_t n_adapters = weights_->loras.size();
    const int n = batch.size();
    std::vector<float> values(n);
    for (size_t k = 0; k < weights_->lora_scales.size(); ++k) {
        ggml_tensor * t = inputs_.lora_scales[k];
        if (!t->buffer) continue;
        const LoraScale & ls = weights_->lora_scales[k];
        const float alpha = weights_->loras[ls.adapter].alpha;
        for (int i = 0; i < n; ++i) {
            const float user = batch.lora[(size_t) i * n_adapters + ls.adapter];
            values[i] = alpha != 0.0f ? user * alpha / (float) ls.rank : user;
        }
        set_input(t, values.data(), n * sizeof(float));
    }
}

void Rank::compute() {
    const int64_t replays = executor_->replays();
    const ggml_status st = executor_->compute(graph_);
    // A replayed step's collectives ran inside the graph: count them all the same.
    if (executor_->replays() > replays) {
        collective_calls_.fetch_add(executor_->collectives_per_replay(), std::memory_order_relaxed);
    }
    if (st != GGML_STATUS_SUCCESS) {
        throw Error("rank " + std::to_string(config_.rank) + ": graph compute failed: " + ggml_status_to_string(st));
    }
    // Whether steps are replayed at all depends on the graphs staying put: say so once.
    if (config_.rank == 0 && !said_replay_ && executor_->replays() > 0) {
        std::fprintf(stderr, "llama-tp: rank 0 replays its steps from a CUDA graph (captured %lld times so far)\n",
                     (long long) executor_->captures());
        said_replay_ = true;
    }
}

uint64_t Rank::memory_bytes() const {
    return weights_->total_bytes() + kv_->bytes() + ggml_gallocr_get_buffer_size(allocator_.get(), 0);
}

void Rank::copy_logits(float * logits, int32_t n_vocab) const {
    if (config_.embeddings) {
        if (config_.rank != 0) return;
        ggml_backend_tensor_get(logits_, logits, 0, ggml_nbytes(logits_));
        return;
    }
    const int64_t v = logits_->ne[0];
    const size_t row_bytes = (size_t) v * sizeof(float);
    for (int64_t r = 0; r < logits_->ne[1]; ++r) {
        ggml_backend_tensor_get(logits_, logits + r * n_vocab + vocab_begin_, r * logits_->nb[1], row_bytes);
    }
}

}  // namespace llama_tp
