#include "runtime/model/weights.h"

#include "runtime/model/weight_declarer.h"

#include "ggml-ext/ops/exact_matmul.h"

#include "runtime/model/control_vector.h"
#include "runtime/error.h"
#include "runtime/model/gguf_file.h"
#include "runtime/shard/shard_plan.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "ggml-cpu.h"
#include "ggml.h"

namespace llama_tp {

namespace {

std::string shape_string(const int64_t * ne, int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

ggml_context * new_meta_context(size_t n_tensors) {
    ggml_init_params params = {n_tensors * ggml_tensor_overhead(), nullptr, /*no_alloc =*/true};
    ggml_context * ctx = ggml_init(params);
    if (!ctx) throw Error("out of memory creating a tensor context");
    return ctx;
}

// The CPU device's first extra buffer type (weight repacking), if any.
ggml_backend_buffer_type_t find_repack_buft(ggml_backend_dev_t device) {
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(device);
    auto get_extra =
        (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    if (!get_extra) return nullptr;
    ggml_backend_buffer_type_t * bufts = get_extra(device);
    return (bufts && bufts[0]) ? bufts[0] : nullptr;
}

// Asks the device whether a matrix multiply with this weight would run from
// the given buffer type (the question depends on the weight's type and shape).
// Stacked experts (3D) are asked about the expert-routed multiply.
bool buft_takes_matrix(ggml_backend_dev_t device, ggml_backend_buffer_type_t buft, const ggml_tensor * desc) {
    ggml_context * ctx = new_meta_context(4);
    const bool experts = desc->ne[2] > 1;
    ggml_tensor * w = ggml_new_tensor(ctx, desc->type, experts ? 3 : 2, desc->ne);
    ggml_tensor * op = nullptr;
    if (experts) {
        ggml_tensor * x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, desc->ne[0], 1, 8);
        ggml_tensor * ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 1, 8);
        op = ggml_mul_mat_id(ctx, w, x, ids);
    } else {
        op = ggml_mul_mat(ctx, w, ggml_new_tensor_2d(ctx, GGML_TYPE_F32, desc->ne[0], 8));
    }
    ggml_backend_buffer_t probe = ggml_backend_buft_alloc_buffer(buft, 0);
    w->buffer = probe;
    const bool ok = probe && ggml_backend_dev_supports_op(device, op);
    if (probe) ggml_backend_buffer_free(probe);
    ggml_free(ctx);
    return ok;
}

// Whether a row-parallel matrix is multiplied in one pass with split-invariant
// sums (experts are not: mul_mat_id has no one-pass form).
bool one_pass(const ggml_tensor * desc, bool experts) {
    return desc && !experts && ggml_ext_exact_matmul_takes(desc->type);
}

// Whether that pass costs nothing against ggml's products, so that the sums
// may be the default: q8_0 on every CPU (as fast or faster on every path
// measured), the K-quants where their kernel beats ggml's (the AVX-512 one).
bool free_one_pass(const ggml_tensor * desc, bool experts) {
    return one_pass(desc, experts) && (desc->type == GGML_TYPE_Q8_0 || ggml_ext_exact_matmul_preferred(desc->type));
}

// A plain matrix (not stacked experts) ggml_ext_exact_matmul takes.
bool one_pass_matrix(ggml_type type, int n_dims) {
    return n_dims == 2 && ggml_ext_exact_matmul_takes(type);
}

}  // namespace

bool ModelWeights::row_parallel_in_one_pass(const GgufFile & file, const HParams & hp) {
    for (int il = 0; il < hp.n_layer; ++il) {
        const std::string p = hp.tensor_prefix(il);
        const char * output = hp.keeps_kv(il) ? "attn_output.weight" : "ssm_out.weight";
        if (!free_one_pass(file.find_tensor(p + output), false) ||
            (hp.block(il).ffn.has_dense() && !free_one_pass(file.find_tensor(p + "ffn_down.weight"), false)) ||
            hp.block(il).ffn.has_experts()) {
            return false;
        }
    }
    return true;
}

std::vector<ggml_type> ModelWeights::one_pass_types(const GgufFile & file) {
    std::vector<ggml_type> types;
    for (int64_t i = 0; i < file.n_tensors(); ++i) {
        const ggml_tensor * t = file.tensor_at(i);
        if (one_pass_matrix(t->type, ggml_n_dims(t)) && std::find(types.begin(), types.end(), t->type) == types.end()) {
            types.push_back(t->type);
        }
    }
    return types;
}

ModelWeights::ModelWeights(const GgufFile & file, const HParams & hp, const WeightsLoad & load)
    : shard_(load.shard),
      device_(load.device),
      check_data_(load.check_data),
      one_pass_products_(load.one_pass_products) {
    if (!load.shard) throw Error("model file '" + file.path() + "': a rank's weights need its share of the model");
    const RankShard & shard = *load.shard;
    const ggml_backend_dev_t device = load.device;
    const std::vector<const GgufFile *> & adapters = load.adapters;
    host_buft_ = ggml_backend_dev_buffer_type(device);
    repack_buft_ = find_repack_buft(device);
    // Split-invariant sums may keep every cell of a row-parallel matrix in a
    // tensor of its own, and a fused matrix is several tensors (phi3: QKV
    // three, gate/up two), so a layer may declare this many beyond its file's.
    const size_t n_pieces = shard.max_pieces();
    size_t n_max = (size_t) file.n_tensors() + 8 + (size_t) hp.n_layer * (n_pieces + 3);
    // An adapter's A of a row-parallel matrix is one tensor per cell.
    for (const GgufFile * a : adapters) n_max += (size_t) a->n_tensors() * (n_pieces + 2);
    host_ctx_.reset(new_meta_context(n_max));
    repack_ctx_.reset(new_meta_context(n_max));

    const int64_t E = hp.n_embd, V = hp.n_vocab;
    WeightDeclarer d{*this, file, hp, load};
    const TensorSlice vocab_rows = d.rows(shard.vocab, 1);

    // Under tensor parallelism the embedding table is split by vocabulary like
    // the output head (a tied head then is the same shard): each rank looks up
    // the tokens in its range and an AllReduce assembles the rows.
    const std::string mtp = hp.mtp_head ? hp.tensor_prefix(0) + "nextn." : "";
    auto own = [&](const std::string & name, const char * trunks) {
        return hp.mtp_head && file.find_tensor(mtp + name) ? mtp + name : std::string(trunks);
    };
    tok_embd = declare(file, own("embed_tokens.weight", "token_embd.weight"), {E, V}, false, vocab_rows);
    output_norm = declare(file, own("shared_head_norm.weight", "output_norm.weight"), {E}, false);
    const std::string head = own("shared_head_head.weight", "output.weight");
    if (file.find_tensor(head) && !hp.head_is_embedding) output = declare(file, head, {E, V}, true, vocab_rows);
    if (hp.mtp_head) {
        mtp_eh_proj = declare(file, mtp + "eh_proj.weight", {2 * E, E}, true);
        mtp_enorm = declare(file, mtp + "enorm.weight", {E}, false);
        mtp_hnorm = declare(file, mtp + "hnorm.weight", {E}, false);
    }
    // One set of frequency factors, for the layers that do not slide (all of
    // them in most models).
    int il_full = 0;
    while (il_full + 1 < hp.n_layer && hp.is_swa(il_full)) ++il_full;
    const int64_t n_factors = hp.layer(il_full).n_rot / 2;
    rope_freqs = declare(file, "rope_freqs.weight", {n_factors}, false, {}, /*required =*/false);
    rope_long = declare(file, "rope_factors_long.weight", {n_factors}, false, {}, /*required =*/false);
    rope_short = declare(file, "rope_factors_short.weight", {n_factors}, false, {}, /*required =*/false);
    if (!rope_long != !rope_short) {
        throw Error("model file '" + file.path() + "': LongRoPE needs both rope_factors_long and rope_factors_short");
    }
    const int64_t PL = hp.n_embd_per_layer;
    if (PL > 0) {
        per_layer_tok_embd = declare(file, "per_layer_token_embd.weight", {PL * hp.n_layer, V}, false, vocab_rows);
        per_layer_model_proj = declare(file, "per_layer_model_proj.weight", {E, PL * hp.n_layer}, true);
        per_layer_proj_norm = declare(file, "per_layer_proj_norm.weight", {PL}, false);
    }
    layers.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) {
        const std::string p = hp.tensor_prefix(il);
        LayerWeights & l = layers[il];
        switch (hp.block(il).attention.kind) {
            case AttentionBlock::Kind::GroupedQuery:
                declare_attention_weights(d, il, l);
                break;
            case AttentionBlock::Kind::GatedDeltaNet:
                declare_delta_net_weights(d, il, l);
                break;
            case AttentionBlock::Kind::MultiHeadLatent:
                declare_latent_attention_weights(d, il, l);
                break;
        }
        declare_ffn_weights(d, il, l);
        if (hp.block(il).output_scale) {
            l.out_scale = declare(file, p + "layer_output_scale.weight", {1}, false, {}, /*required =*/false);
        }
        if (PL > 0) {
            l.per_layer_gate = declare(file, p + "inp_gate.weight", {E, PL}, true);
            l.per_layer_proj = declare(file, p + "proj.weight", {PL, E}, true);
            l.per_layer_norm = declare(file, p + "post_norm.weight", {E}, false);
        }
    }
    for (const GgufFile * a : adapters) declare_adapter(*a, file, hp);
    allocate_and_read(file, load.progress);
    if (!output) output = tok_embd;
}

ggml_tensor * ModelWeights::rope_factors(int32_t n_ctx_seq, const HParams & hp) const {
    if (rope_freqs || !rope_long) return rope_freqs;
    return GGML_PAD(n_ctx_seq, 256) > hp.n_ctx_orig_train ? rope_long : rope_short;
}

// The file tensor, checked against the shape the architecture gives it.
const ggml_tensor * ModelWeights::find_checked(const GgufFile & file, const std::string & name,
                                               const std::vector<int64_t> & shape, bool required) const {
    const ggml_tensor * desc = file.find_tensor(name);
    if (!desc) {
        if (!required) return nullptr;
        throw Error("model file '" + file.path() + "': missing tensor '" + name + "'");
    }
    int64_t ne[GGML_MAX_DIMS] = {1, 1, 1, 1};
    for (size_t i = 0; i < shape.size(); ++i) ne[i] = shape[i];
    for (int i = 0; i < GGML_MAX_DIMS; ++i) {
        if (desc->ne[i] != ne[i]) {
            throw Error("model file '" + file.path() + "': tensor '" + name + "' has shape " +
                        shape_string(desc->ne, GGML_MAX_DIMS) + ", expected " + shape_string(ne, GGML_MAX_DIMS));
        }
    }
    return desc;
}

ggml_tensor * ModelWeights::declare(const GgufFile & file, const std::string & name, std::vector<int64_t> shape,
                                    bool matrix, TensorSlice slice, bool required) {
    const ggml_tensor * desc = find_checked(file, name, shape, required);
    if (!desc) return nullptr;
    // One rank's share is all of the tensor: read it whole, at once.
    const int64_t extent = slice.axis == TensorSlice::Rows     ? desc->ne[1]
                           : slice.axis == TensorSlice::Planes ? desc->ne[2]
                                                               : desc->ne[0];
    if (slice.axis != TensorSlice::Whole && slice.begin == 0 && slice.end == extent) slice = TensorSlice{};
    int64_t ne[GGML_MAX_DIMS] = {1, 1, 1, 1};
    std::copy(desc->ne, desc->ne + GGML_MAX_DIMS, ne);
    if (slice.axis == TensorSlice::Rows) ne[1] = slice.end - slice.begin;
    if (slice.axis == TensorSlice::Planes) ne[2] = slice.end - slice.begin;
    if (slice.axis == TensorSlice::Columns) {
        if (slice.begin % ggml_blck_size(desc->type) != 0 || slice.end % ggml_blck_size(desc->type) != 0) {
            throw Error("model file '" + file.path() + "': tensor '" + name + "' (" + ggml_type_name(desc->type) +
                        ") cannot be split at column " + std::to_string(slice.begin) + ": not a block boundary");
        }
        ne[0] = slice.end - slice.begin;
    }
    return add_tensor(name, desc->type, (int) shape.size(), ne, matrix, {{name, slice, &file}});
}

ggml_tensor * ModelWeights::declare_rows(const GgufFile & file, const std::string & name,
                                         const std::vector<int64_t> & shape, const std::vector<TensorSlice> & parts,
                                         bool matrix) {
    const ggml_tensor * desc = find_checked(file, name, shape, true);
    int64_t ne[GGML_MAX_DIMS] = {desc->ne[0], 0, desc->ne[2], desc->ne[3]};
    std::vector<Part> sources;
    for (const TensorSlice & slice : parts) {
        GGML_ASSERT(slice.axis == TensorSlice::Rows);
        ne[1] += slice.end - slice.begin;
        sources.push_back({name, slice, &file});
    }
    return add_tensor(name, desc->type, (int) shape.size(), ne, matrix, std::move(sources));
}

ggml_tensor * ModelWeights::declare_cols(const GgufFile & file, const std::string & name,
                                         const std::vector<int64_t> & shape, const std::vector<TensorSlice> & parts,
                                         bool matrix) {
    if (parts.size() == 1) return declare(file, name, shape, matrix, parts.front());
    const ggml_tensor * desc = find_checked(file, name, shape, true);
    int64_t ne[GGML_MAX_DIMS] = {0, desc->ne[1], desc->ne[2], desc->ne[3]};
    std::vector<Part> sources;
    for (const TensorSlice & slice : parts) {
        GGML_ASSERT(slice.axis == TensorSlice::Columns);
        if (slice.begin % ggml_blck_size(desc->type) != 0 || slice.end % ggml_blck_size(desc->type) != 0) {
            throw Error("model file '" + file.path() + "': tensor '" + name + "' (" + ggml_type_name(desc->type) +
                        ") cannot be split at column " + std::to_string(slice.begin) + ": not a block boundary");
        }
        ne[0] += slice.end - slice.begin;
        sources.push_back({name, slice, &file});
    }
    return add_tensor(name, desc->type, (int) shape.size(), ne, matrix, std::move(sources));
}

bool ModelWeights::one_pass_product(const ggml_tensor * weight) const {
    return one_pass_products_ && one_pass_matrix(weight->type, ggml_n_dims(weight));
}

ggml_tensor * ModelWeights::add_tensor(const std::string & name, ggml_type type, int n_dims, const int64_t * ne,
                                       bool matrix, std::vector<Part> parts) {
    ggml_tensor probe{};
    probe.type = type;
    std::copy(ne, ne + GGML_MAX_DIMS, probe.ne);
    // A matrix of the one-pass kernel keeps ggml's plain layout.
    const bool repack = matrix && !(one_pass_products_ && one_pass_matrix(type, n_dims)) && repack_buft_ &&
                        buft_takes_matrix(device_, repack_buft_, &probe);
    ggml_tensor * t = ggml_new_tensor(repack ? repack_ctx_.get() : host_ctx_.get(), type, n_dims, ne);
    ggml_set_name(t, name.c_str());
    n_params_ += ggml_nelements(t);
    sources_.push_back({t, std::move(parts)});
    return t;
}

// Where a tensor for a device the host cannot write is read to first: the
// device's page-locked host memory where it has some (a GPU copies from it
// at full speed, and from ordinary memory through a bounce buffer), else
// ordinary memory.
class ModelWeights::Staging {
  public:
    explicit Staging(ggml_backend_dev_t device) : pinned_type_(ggml_backend_dev_host_buffer_type(device)) {}
    uint8_t * get(size_t n) {
        if (pinned_type_) {
            if (!pinned_ || ggml_backend_buffer_get_size(pinned_.get()) < n) {
                pinned_.reset();
                pinned_.reset(ggml_backend_buft_alloc_buffer(pinned_type_, n));
            }
            if (pinned_) return static_cast<uint8_t *>(ggml_backend_buffer_get_base(pinned_.get()));
            pinned_type_ = nullptr;  // no page-locked memory to spare: ordinary memory from now on
        }
        ordinary_.resize(n);
        return ordinary_.data();
    }

  private:
    ggml_backend_buffer_type_t pinned_type_;
    ggml_backend_buffer_ptr pinned_;
    std::vector<uint8_t> ordinary_;
};

void ModelWeights::allocate_and_read(const GgufFile & file, bool progress) {
    for (auto [ctx, buft] : {std::pair{host_ctx_.get(), host_buft_}, std::pair{repack_ctx_.get(), repack_buft_}}) {
        if (!ggml_get_first_tensor(ctx)) continue;
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft);
        if (!buf) throw Error("out of memory allocating weights for '" + file.path() + "'");
        ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        buffers_.emplace_back(buf);
    }
    const uint64_t total = total_bytes();
    const bool show = progress && total > (256u << 20);
    uint64_t done = 0;
    int last_pct = -1;
    Staging staging(device_);
    for (auto & [t, parts] : sources_) {
        read_tensor(t, parts, staging);
        for (Part & part : parts) part.file = nullptr;  // the files are the caller's, open only for the load
        done += ggml_nbytes(t);
        const int pct = (int) (100 * done / (total ? total : 1));
        if (show && pct / 10 != last_pct / 10) {
            std::fprintf(stderr, "llama-tp: loading %s: %3d%%\n", file.path().c_str(), pct);
            last_pct = pct;
        }
    }
}

// Reads a tensor's parts from the file: row ranges slab by 2D slab (per
// expert for stacked experts), each part's rows of a slab in turn, so that a
// fused matrix keeps its parts within every expert; a whole tensor at once;
// column ranges row by row.
void ModelWeights::read_tensor(ggml_tensor * t, const std::vector<Part> & parts, Staging & staging) const {
    const size_t n = ggml_nbytes(t);
    const bool host = ggml_backend_buffer_is_host(t->buffer);
    uint8_t * const staged = host ? nullptr : staging.get(n);
    uint8_t * dst = host ? static_cast<uint8_t *>(t->data) : staged;
    if (parts.front().slice.axis == TensorSlice::Rows) {
        for (int64_t s = 0; s < t->ne[2] * t->ne[3]; ++s) {
            for (const Part & part : parts) dst += read_rows(*part.file, part, s, dst);
        }
    } else if (parts.front().slice.axis == TensorSlice::Columns) {
        read_columns(t, parts, dst);
    } else if (parts.front().slice.axis == TensorSlice::Planes) {
        // Whole matrices, adjacent in the file.
        const Part & part = parts.front();
        const ggml_tensor * desc = part.file->find_tensor(part.name);
        part.file->read_tensor(desc, (size_t) part.slice.begin * desc->nb[2], dst, n);
    } else {
        for (const Part & part : parts) dst += read_whole(*part.file, part, dst);
    }
    if (check_data_ && !ggml_validate_row_data(t->type, host ? t->data : staged, n)) {
        throw Error("model file '" + parts.front().file->path() + "': tensor '" + parts.front().name +
                    "' has invalid data (a NaN, an infinity or a bad block scale)");
    }
    if (!host) ggml_backend_tensor_set(t, staged, 0, n);
}

size_t ModelWeights::read_rows(const GgufFile & file, const Part & part, int64_t slab, uint8_t * dst) const {
    GGML_ASSERT(part.slice.axis == TensorSlice::Rows);
    const ggml_tensor * desc = file.find_tensor(part.name);
    const size_t file_row = ggml_row_size(desc->type, desc->ne[0]);
    const size_t n = (size_t) (part.slice.end - part.slice.begin) * file_row;
    file.read_tensor(desc, (size_t) slab * desc->ne[1] * file_row + part.slice.begin * file_row, dst, n);
    return n;
}

size_t ModelWeights::read_whole(const GgufFile & file, const Part & part, uint8_t * dst) const {
    const ggml_tensor * desc = file.find_tensor(part.name);
    file.read_tensor(desc, 0, dst, ggml_nbytes(desc));
    return ggml_nbytes(desc);
}

// Every row's column ranges in turn, side by side.
void ModelWeights::read_columns(const ggml_tensor * t, const std::vector<Part> & parts, uint8_t * dst) const {
    const int64_t n_rows = ggml_nrows(t);
    for (int64_t r = 0; r < n_rows; ++r) {
        for (const Part & part : parts) {
            const ggml_tensor * desc = part.file->find_tensor(part.name);
            const size_t file_row = ggml_row_size(desc->type, desc->ne[0]);
            const size_t n = ggml_row_size(desc->type, part.slice.end - part.slice.begin);
            part.file->read_tensor(desc, r * file_row + ggml_row_size(desc->type, part.slice.begin), dst, n);
            dst += n;
        }
    }
}

const std::vector<ModelWeights::Part> & ModelWeights::parts_of(const ggml_tensor * t) const {
    for (const auto & [tensor, parts] : sources_) {
        if (tensor == t) return parts;
    }
    throw Error(std::string("no source recorded for tensor '") + ggml_get_name(t) + "'");
}

const LoraWeight * ModelWeights::lora(size_t i, const ggml_tensor * base) const {
    const auto it = loras[i].weights.find(base);
    return it == loras[i].weights.end() ? nullptr : &it->second;
}

void ModelWeights::add_control_vector(const ControlVector & cv) {
    control_ctx_.reset(new_meta_context(layers.size()));
    for (size_t il = 0; il < layers.size(); ++il) {
        if (cv.layer((int32_t) il)) {
            layers[il].control = ggml_new_tensor_1d(control_ctx_.get(), GGML_TYPE_F32, tok_embd->ne[0]);
        }
    }
    if (!ggml_get_first_tensor(control_ctx_.get())) return;
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(control_ctx_.get(), host_buft_);
    if (!buf) throw Error("out of memory allocating a control vector");
    buffers_.emplace_back(buf);
    for (size_t il = 0; il < layers.size(); ++il) {
        if (ggml_tensor * t = layers[il].control) ggml_backend_tensor_set(t, cv.layer((int32_t) il), 0, ggml_nbytes(t));
    }
}

uint64_t ModelWeights::total_bytes() const {
    uint64_t n = 0;
    for (const auto & b : buffers_) n += ggml_backend_buffer_get_size(b.get());
    return n;
}

ggml_tensor * WeightDeclarer::declare(const std::string & name, std::vector<int64_t> shape, bool matrix,
                                      TensorSlice slice, bool required) {
    return weights.declare(file, name, std::move(shape), matrix, slice, required);
}

ggml_tensor * WeightDeclarer::declare_rows(const std::string & name, const std::vector<int64_t> & shape,
                                           const std::vector<TensorSlice> & parts, bool matrix) {
    return weights.declare_rows(file, name, shape, parts, matrix);
}

ggml_tensor * WeightDeclarer::declare_cols(const std::string & name, const std::vector<int64_t> & shape,
                                           const std::vector<TensorSlice> & parts, bool matrix) {
    return weights.declare_cols(file, name, shape, parts, matrix);
}

RowParallelWeight WeightDeclarer::row_parallel(const std::string & name, const std::vector<int64_t> & shape,
                                               const std::vector<ShardRange> & cells, int64_t unit, bool experts,
                                               size_t all_cells) {
    const bool split_invariant = load.split_invariant;
    RowParallelWeight w;
    w.cell_bounds = {0};
    // The rank's columns: its cells, those adjacent in the file joined.
    std::vector<TensorSlice> ranges;
    for (const ShardRange & r : cells) {
        w.cell_bounds.push_back(w.cell_bounds.back() + r.size() * unit);
        if (!ranges.empty() && ranges.back().end == r.begin * unit) {
            ranges.back().end = r.end * unit;
        } else {
            ranges.push_back(cols(r, unit));
        }
    }
    w.first = cells.front().begin == 0;
    w.one_pass = split_invariant && load.ops == RankOps::Host && one_pass(file.find_tensor(name), experts) &&
                 std::max(all_cells, cells.size()) <= GGML_EXT_EXACT_MATMUL_MAX_CELLS;
    if (!split_invariant || w.one_pass) {
        w.pieces.push_back(declare_cols(name, shape, ranges, !w.one_pass));
        return w;
    }
    for (const ShardRange & r : cells) w.pieces.push_back(declare(name, shape, true, cols(r, unit)));
    return w;
}

}  // namespace llama_tp
