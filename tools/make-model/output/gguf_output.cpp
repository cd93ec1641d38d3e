#include "tools/make-model/output/gguf_output.h"

#include "tools/make-model/output/atomic_file.h"
#include "tools/make-model/output/tensor_data.h"

#include "ggml.h"
#include "gguf.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

namespace llama_tp::make_model {
namespace {

struct GgmlContextDeleter {
    void operator()(ggml_context * ctx) const { ggml_free(ctx); }
};
using GgmlContextPtr = std::unique_ptr<ggml_context, GgmlContextDeleter>;

constexpr const char * kTokenListKey = "tokenizer.ggml.tokens";
constexpr const char * kTokenizerPrefix = "tokenizer.";

void copy_array(gguf_context * dst, const gguf_context * src, int64_t id) {
    const char * key = gguf_get_key(src, id);
    const gguf_type element_type = gguf_get_arr_type(src, id);
    const size_t n = gguf_get_arr_n(src, id);
    if (element_type == GGUF_TYPE_STRING) {
        std::vector<const char *> strings(n);
        for (size_t i = 0; i < n; ++i) {
            strings[i] = gguf_get_arr_str(src, id, i);
        }
        gguf_set_arr_str(dst, key, strings.data(), n);
    } else if (element_type == GGUF_TYPE_ARRAY) {
        throw IoError(std::string("nested array key '") + key + "' is not supported");
    } else {
        gguf_set_arr_data(dst, key, element_type, gguf_get_arr_data(src, id), n);
    }
}

void copy_key(gguf_context * dst, const gguf_context * src, int64_t id) {
    const char * key = gguf_get_key(src, id);
    switch (gguf_get_kv_type(src, id)) {
        case GGUF_TYPE_UINT8:
            return gguf_set_val_u8(dst, key, gguf_get_val_u8(src, id));
        case GGUF_TYPE_INT8:
            return gguf_set_val_i8(dst, key, gguf_get_val_i8(src, id));
        case GGUF_TYPE_UINT16:
            return gguf_set_val_u16(dst, key, gguf_get_val_u16(src, id));
        case GGUF_TYPE_INT16:
            return gguf_set_val_i16(dst, key, gguf_get_val_i16(src, id));
        case GGUF_TYPE_UINT32:
            return gguf_set_val_u32(dst, key, gguf_get_val_u32(src, id));
        case GGUF_TYPE_INT32:
            return gguf_set_val_i32(dst, key, gguf_get_val_i32(src, id));
        case GGUF_TYPE_FLOAT32:
            return gguf_set_val_f32(dst, key, gguf_get_val_f32(src, id));
        case GGUF_TYPE_BOOL:
            return gguf_set_val_bool(dst, key, gguf_get_val_bool(src, id));
        case GGUF_TYPE_STRING:
            return gguf_set_val_str(dst, key, gguf_get_val_str(src, id));
        case GGUF_TYPE_UINT64:
            return gguf_set_val_u64(dst, key, gguf_get_val_u64(src, id));
        case GGUF_TYPE_INT64:
            return gguf_set_val_i64(dst, key, gguf_get_val_i64(src, id));
        case GGUF_TYPE_FLOAT64:
            return gguf_set_val_f64(dst, key, gguf_get_val_f64(src, id));
        case GGUF_TYPE_ARRAY:
            return copy_array(dst, src, id);
        case GGUF_TYPE_COUNT:
            break;
    }
    throw IoError(std::string("key '") + key + "' has an unknown type");
}

// Tensor descriptions (no data) for gguf_add_tensor, which copies them.
GgmlContextPtr describe_tensors(const std::vector<TensorPlan> & plans, const std::vector<size_t> & which) {
    ggml_init_params params = {};
    params.mem_size = (which.size() + 1) * ggml_tensor_overhead();
    params.no_alloc = true;
    GgmlContextPtr ctx(ggml_init(params));
    if (!ctx) {
        throw std::runtime_error("ggml_init failed");
    }
    for (const size_t i : which) {
        const TensorPlan & plan = plans[i];
        ggml_tensor * tensor = ggml_new_tensor(ctx.get(), plan.type, static_cast<int>(plan.ne.size()), plan.ne.data());
        ggml_set_name(tensor, plan.name.c_str());
    }
    return ctx;
}

// The GGUF of one part: the first carries the model's metadata; with several
// parts every one carries upstream's split.* keys.
GgufPtr build_gguf(const ModelSpec & spec, const Vocabulary & vocab, ggml_context * tensors, size_t part,
                   size_t n_parts, size_t n_tensors, bool split) {
    GgufPtr gguf(gguf_init_empty());
    if (part == 0) {
        set_model_metadata(gguf.get(), spec, vocab.n_tokens());
        vocab.copy_tokenizer_keys(gguf.get());
        if (!spec.suppress_tokens.empty()) {
            gguf_set_arr_data(gguf.get(), "tokenizer.ggml.suppress_tokens", GGUF_TYPE_INT32,
                              spec.suppress_tokens.data(), spec.suppress_tokens.size());
        }
        if (!spec.chat_template.empty()) {
            gguf_set_val_str(gguf.get(), "tokenizer.chat_template", spec.chat_template.c_str());
        }
    }
    if (split) {
        gguf_set_val_u16(gguf.get(), "split.no", static_cast<uint16_t>(part));
        gguf_set_val_u16(gguf.get(), "split.count", static_cast<uint16_t>(n_parts));
        gguf_set_val_i32(gguf.get(), "split.tensors.count", static_cast<int32_t>(n_tensors));
    }
    for (ggml_tensor * t = ggml_get_first_tensor(tensors); t != nullptr; t = ggml_get_next_tensor(tensors, t)) {
        gguf_add_tensor(gguf.get(), t);
    }
    return gguf;
}

uint64_t padded_tensor_size(const TensorPlan & plan) {
    const uint64_t bytes = ggml_row_size(plan.type, plan.row_length()) * static_cast<uint64_t>(plan.n_rows());
    return GGML_PAD(bytes, GGUF_DEFAULT_ALIGNMENT);
}

// gguf-split numbers parts with five digits.
constexpr size_t kMaxParts = 99999;

uint64_t padded_data_size(const gguf_context * gguf) {
    const int64_t n = gguf_get_n_tensors(gguf);
    if (n == 0) {
        return 0;
    }
    return GGML_PAD(gguf_get_tensor_offset(gguf, n - 1) + gguf_get_tensor_size(gguf, n - 1), gguf_get_alignment(gguf));
}

// A progress line on stderr, only for outputs big enough to take a while.
class Progress {
  public:
    explicit Progress(uint64_t total) : total_(total), enabled_(total >= kMinBytes), tty_(isatty(2) != 0) {}

    void advance(uint64_t bytes) {
        done_ += bytes;
        if (!enabled_) {
            return;
        }
        const int percent = static_cast<int>(done_ * 100 / total_);
        // A terminal gets a line updated in place; a log gets a line every 10%.
        const int step = tty_ ? 1 : 10;
        if (percent / step == shown_ / step) {
            return;
        }
        shown_ = percent;
        std::fprintf(stderr, "%s[%3d%%] %llu / %llu MiB%s", tty_ ? "\r" : "", percent,
                     static_cast<unsigned long long>(done_ >> 20), static_cast<unsigned long long>(total_ >> 20),
                     tty_ ? "" : "\n");
        if (tty_ && percent == 100) {
            std::fprintf(stderr, "\n");
        }
    }

  private:
    static constexpr uint64_t kMinBytes = uint64_t(256) << 20;

    uint64_t total_;
    uint64_t done_ = 0;
    int shown_ = -1;
    bool enabled_;
    bool tty_;
};

void write_metadata(const gguf_context * gguf, AtomicFile & file) {
    std::vector<char> meta(gguf_get_meta_size(gguf));
    gguf_get_meta_data(gguf, meta.data());
    file.write(meta.data(), meta.size());
}

void write_tensor_data(const gguf_context * gguf, const std::vector<TensorPlan> & plans,
                       const std::vector<size_t> & which, const TensorDataGenerator & generator, Progress & progress,
                       AtomicFile & file) {
    const uint64_t data_start = file.bytes_written();
    const size_t alignment = gguf_get_alignment(gguf);
    for (size_t k = 0; k < which.size(); ++k) {
        GGML_ASSERT(file.bytes_written() - data_start == gguf_get_tensor_offset(gguf, static_cast<int64_t>(k)));
        generator.generate(plans[which[k]], [&](const void * data, size_t size) {
            file.write(data, size);
            progress.advance(size);
        });
        const size_t size = gguf_get_tensor_size(gguf, static_cast<int64_t>(k));
        const size_t padding = GGML_PAD(size, alignment) - size;
        file.write_zeros(padding);
        progress.advance(padding);
    }
}

}  // namespace

void GgufDeleter::operator()(gguf_context * gguf) const {
    gguf_free(gguf);
}

Vocabulary::Vocabulary(const std::string & path) : path_(path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
        throw IoError("vocabulary file '" + path + "' does not exist or is not a regular file");
    }
    gguf_init_params params = {};
    params.no_alloc = true;
    params.ctx = nullptr;
    gguf_.reset(gguf_init_from_file(path.c_str(), params));
    if (!gguf_) {
        throw IoError("cannot read vocabulary file '" + path + "': not a valid GGUF file");
    }
    const int64_t tokens_id = gguf_find_key(gguf_.get(), kTokenListKey);
    if (tokens_id < 0 || gguf_get_kv_type(gguf_.get(), tokens_id) != GGUF_TYPE_ARRAY ||
        gguf_get_arr_type(gguf_.get(), tokens_id) != GGUF_TYPE_STRING) {
        throw IoError("vocabulary file '" + path + "' has no " + kTokenListKey + " string array");
    }
    n_tokens_ = static_cast<int64_t>(gguf_get_arr_n(gguf_.get(), tokens_id));
    if (n_tokens_ == 0) {
        throw IoError("vocabulary file '" + path + "' has an empty token list");
    }
}

void Vocabulary::copy_tokenizer_keys(gguf_context * dst) const {
    const size_t prefix_length = std::strlen(kTokenizerPrefix);
    for (int64_t id = 0; id < gguf_get_n_kv(gguf_.get()); ++id) {
        if (std::strncmp(gguf_get_key(gguf_.get(), id), kTokenizerPrefix, prefix_length) == 0) {
            copy_key(dst, gguf_.get(), id);
        }
    }
}

std::vector<std::vector<size_t>> plan_parts(const std::vector<TensorPlan> & plans, uint64_t max_part_bytes) {
    std::vector<std::vector<size_t>> parts(1);
    uint64_t bytes = 0;
    for (size_t i = 0; i < plans.size(); ++i) {
        const uint64_t size = padded_tensor_size(plans[i]);
        if (max_part_bytes > 0 && !parts.back().empty() && bytes + size > max_part_bytes) {
            parts.emplace_back();
            bytes = 0;
        }
        parts.back().push_back(i);
        bytes += size;
    }
    if (parts.size() > kMaxParts) {
        throw UsageError("--split-max-size " + std::to_string(max_part_bytes) + " would make " +
                         std::to_string(parts.size()) + " parts; at most " + std::to_string(kMaxParts));
    }
    return parts;
}

std::vector<std::string> part_paths(const std::string & path, size_t n_parts, bool split) {
    if (!split) {
        return {path};
    }
    const std::string ext = ".gguf";
    const bool has_ext = path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
    const std::string prefix = has_ext ? path.substr(0, path.size() - ext.size()) : path;
    std::vector<std::string> out;
    for (size_t i = 0; i < n_parts; ++i) {
        char suffix[64];
        std::snprintf(suffix, sizeof suffix, "-%05zu-of-%05zu.gguf", i + 1, n_parts);
        out.push_back(prefix + suffix);
    }
    return out;
}

uint64_t planned_file_size(const ModelSpec & spec, const Vocabulary & vocab, const std::vector<TensorPlan> & plans,
                           uint64_t max_part_bytes) {
    const std::vector<std::vector<size_t>> parts = plan_parts(plans, max_part_bytes);
    uint64_t total = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
        const GgmlContextPtr tensors = describe_tensors(plans, parts[p]);
        const GgufPtr gguf = build_gguf(spec, vocab, tensors.get(), p, parts.size(), plans.size(), max_part_bytes > 0);
        total += gguf_get_meta_size(gguf.get()) + padded_data_size(gguf.get());
    }
    return total;
}

WriteResult write_model(const std::string & path, const ModelSpec & spec, const Vocabulary & vocab,
                        const std::vector<TensorPlan> & plans, int n_threads, uint64_t max_part_bytes) {
    const bool split = max_part_bytes > 0;
    const std::vector<std::vector<size_t>> parts = plan_parts(plans, max_part_bytes);
    const std::vector<std::string> paths = part_paths(path, parts.size(), split);
    const TensorDataGenerator generator(spec.seed, n_threads);
    uint64_t data_bytes = 0;
    for (const TensorPlan & plan : plans) {
        data_bytes += padded_tensor_size(plan);
    }
    Progress progress(data_bytes);

    // Every part is committed only once all are complete.
    std::vector<std::unique_ptr<AtomicFile>> files;
    WriteResult result;
    for (size_t p = 0; p < parts.size(); ++p) {
        const GgmlContextPtr tensors = describe_tensors(plans, parts[p]);
        const GgufPtr gguf = build_gguf(spec, vocab, tensors.get(), p, parts.size(), plans.size(), split);
        files.push_back(std::make_unique<AtomicFile>(paths[p]));
        write_metadata(gguf.get(), *files.back());
        write_tensor_data(gguf.get(), plans, parts[p], generator, progress, *files.back());
        result.file_bytes += files.back()->bytes_written();
    }
    for (const auto & file : files) {
        file->commit();
    }
    result.n_tensors = plans.size();
    result.paths = paths;
    return result;
}

uint64_t write_planned_file(const std::string & path, gguf_context * meta, const std::vector<TensorPlan> & plans,
                            uint64_t seed, int n_threads) {
    ggml_init_params tp = {plans.size() * ggml_tensor_overhead(), nullptr, /*no_alloc =*/true};
    const GgmlContextPtr tensors(ggml_init(tp));
    for (const TensorPlan & p : plans) {
        ggml_tensor * t = ggml_new_tensor(tensors.get(), p.type, (int) p.ne.size(), p.ne.data());
        ggml_set_name(t, p.name.c_str());
        gguf_add_tensor(meta, t);
    }
    AtomicFile file(path);
    std::vector<char> header(gguf_get_meta_size(meta));
    gguf_get_meta_data(meta, header.data());
    file.write(header.data(), header.size());
    const TensorDataGenerator generator(seed, n_threads);
    const size_t alignment = gguf_get_alignment(meta);
    for (const TensorPlan & p : plans) {
        size_t size = 0;
        generator.generate(p, [&](const void * data, size_t n) {
            file.write(data, n);
            size += n;
        });
        file.write_zeros(GGML_PAD(size, alignment) - size);
    }
    const uint64_t bytes = file.bytes_written();
    file.commit();
    return bytes;
}

}  // namespace llama_tp::make_model
