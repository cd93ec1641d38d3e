#include "runtime/model/gguf_file.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <cstdio>
#include <vector>

#include "runtime/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "ggml.h"
#include "gguf.h"

namespace llama_tp {

namespace {

struct GgufDeleter {
    void operator()(gguf_context * ctx) const { gguf_free(ctx); }
};
struct GgmlDeleter {
    void operator()(ggml_context * ctx) const { ggml_free(ctx); }
};

// The n-th of count parts' file name suffix, as upstream's gguf-split writes it.
std::string part_suffix(int n, int count) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", n + 1, count);
    return buf;
}

bool ends_with(const std::string & s, const std::string & suffix) {
    return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A split.* key of a part: -1 when absent.
int64_t split_key(gguf_context * g, const char * key) {
    const int64_t id = gguf_find_key(g, key);
    if (id < 0) return -1;
    switch (gguf_get_kv_type(g, id)) {
        case GGUF_TYPE_UINT16:
            return gguf_get_val_u16(g, id);
        case GGUF_TYPE_INT32:
            return gguf_get_val_i32(g, id);
        case GGUF_TYPE_UINT32:
            return gguf_get_val_u32(g, id);
        default:
            return -1;
    }
}

}  // namespace

// One file of the model, its header parsed.
struct GgufFile::Part {
    std::string path;
    int fd = -1;
    uint64_t size = 0;
    std::unique_ptr<ggml_context, GgmlDeleter> meta;
    std::unique_ptr<gguf_context, GgufDeleter> gguf;

    explicit Part(const std::string & p) : path(p) {
        fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw Error("cannot open model file '" + path + "': " + std::strerror(errno));
        struct stat st {};
        if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            throw Error("model file '" + path + "' is not a regular file");
        }
        size = (uint64_t) st.st_size;
        ggml_context * ctx = nullptr;
        gguf_init_params params = {/*no_alloc =*/true, /*ctx =*/&ctx};
        gguf.reset(gguf_init_from_file(path.c_str(), params));
        meta.reset(ctx);
        if (!gguf) {
            throw Error("'" + path +
                        "' is not a valid GGUF file (bad magic, version or header, or truncated metadata)");
        }
    }
    ~Part() {
        if (fd >= 0) ::close(fd);
    }
    Part(const Part &) = delete;
    Part & operator=(const Part &) = delete;

    void read(uint64_t offset, void * dst, size_t n) const {
        auto * out = static_cast<char *>(dst);
        while (n > 0) {
            const ssize_t got = ::pread(fd, out, n, (off_t) offset);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                throw Error("reading model file '" + path + "' at byte " + std::to_string(offset) +
                            " failed: " + (got == 0 ? std::string("unexpected end of file") : std::strerror(errno)));
            }
            out += got;
            offset += (uint64_t) got;
            n -= (size_t) got;
        }
    }
};

GgufFile::GgufFile(const std::string & path, const std::vector<MetadataOverride> & overrides) {
    parts_.push_back(std::make_unique<Part>(path));
    gguf_context * first = parts_[0]->gguf.get();
    const int64_t count = split_key(first, "split.count");
    if (count > 1) {
        const int64_t no = split_key(first, "split.no");
        if (no != 0) {
            const std::string own = part_suffix((int) no, (int) count);
            const std::string prefix = ends_with(path, own) ? path.substr(0, path.size() - own.size()) : "*";
            throw Error("model file '" + path + "' is part " + std::to_string(no + 1) + " of " + std::to_string(count) +
                        " of a split model: give the first part, '" + prefix + part_suffix(0, (int) count) + "'");
        }
        open_other_parts((int) count);
    }
    for (const auto & part : parts_) index_tensors(*part);
    const int64_t expected = split_key(first, "split.tensors.count");
    if (count > 1 && expected >= 0 && expected != n_tensors()) {
        throw Error("model file '" + path + "': its " + std::to_string(count) + " parts hold " +
                    std::to_string(n_tensors()) + " tensors, but split.tensors.count says " + std::to_string(expected));
    }
    take_overrides(overrides);
}

namespace {

// The override type a metadata value of the file is read as.
std::optional<MetadataOverride::Type> override_type(gguf_type t) {
    switch (t) {
        case GGUF_TYPE_UINT8:
        case GGUF_TYPE_INT8:
        case GGUF_TYPE_UINT16:
        case GGUF_TYPE_INT16:
        case GGUF_TYPE_UINT32:
        case GGUF_TYPE_INT32:
        case GGUF_TYPE_UINT64:
        case GGUF_TYPE_INT64:
            return MetadataOverride::Type::Int;
        case GGUF_TYPE_FLOAT32:
        case GGUF_TYPE_FLOAT64:
            return MetadataOverride::Type::Float;
        case GGUF_TYPE_BOOL:
            return MetadataOverride::Type::Bool;
        case GGUF_TYPE_STRING:
            return MetadataOverride::Type::Str;
        default:
            return std::nullopt;  // arrays: not overridable
    }
}

const char * type_name(MetadataOverride::Type t) {
    switch (t) {
        case MetadataOverride::Type::Int:
            return "int";
        case MetadataOverride::Type::Float:
            return "float";
        case MetadataOverride::Type::Bool:
            return "bool";
        case MetadataOverride::Type::Str:
            return "str";
    }
    return "?";
}

}  // namespace

void GgufFile::take_overrides(const std::vector<MetadataOverride> & overrides) {
    for (const MetadataOverride & o : overrides) {
        const int64_t id = key_id(o.key);
        if (id >= 0) {
            const auto file_type = override_type(gguf_get_kv_type(parts_[0]->gguf.get(), id));
            if (file_type != o.type) {
                std::fprintf(stderr,
                             "llama-tp: warning: model file '%s': metadata override %s dropped: the file's "
                             "value is %s\n",
                             path().c_str(), o.describe().c_str(), file_type ? type_name(*file_type) : "an array");
                continue;
            }
        }
        overrides_.push_back(o);
    }
}

const MetadataOverride * GgufFile::override_of(const std::string & key, MetadataOverride::Type wanted) const {
    for (const MetadataOverride & o : overrides_) {
        if (o.key != key) continue;
        if (o.type == wanted) return &o;
        // Read as another type than given: ignored, as upstream's loader ignores it.
        std::fprintf(stderr, "llama-tp: warning: model file '%s': metadata override %s ignored: %s is read as %s\n",
                     path().c_str(), o.describe().c_str(), key.c_str(), type_name(wanted));
        return nullptr;
    }
    return nullptr;
}

MetadataOverride MetadataOverride::parse(const std::string & text) {
    const size_t eq = text.find('=');
    const size_t colon = eq == std::string::npos ? eq : text.find(':', eq);
    if (eq == std::string::npos || eq == 0 || colon == std::string::npos) {
        throw Error("metadata override '" + text + "': expected KEY=TYPE:VALUE");
    }
    MetadataOverride o;
    o.key = text.substr(0, eq);
    const std::string type = text.substr(eq + 1, colon - eq - 1), value = text.substr(colon + 1);
    // libllama keeps keys and string values in 128 bytes.
    if (o.key.size() > 127) throw Error("metadata override '" + text + "': the key is longer than 127 bytes");
    char * end = nullptr;
    if (type == "int") {
        o.type = Type::Int;
        o.i = std::strtoll(value.c_str(), &end, 10);
    } else if (type == "float") {
        o.type = Type::Float;
        o.f = std::strtod(value.c_str(), &end);
    } else if (type == "bool") {
        o.type = Type::Bool;
        if (value != "true" && value != "false") {
            throw Error("metadata override '" + text + "': a bool is true or false");
        }
        o.b = value == "true";
        return o;
    } else if (type == "str") {
        o.type = Type::Str;
        if (value.size() > 127) throw Error("metadata override '" + text + "': the value is longer than 127 bytes");
        o.s = value;
        return o;
    } else {
        throw Error("metadata override '" + text + "': the type is int, float, bool or str, not '" + type + "'");
    }
    if (value.empty() || *end != '\0') {
        throw Error("metadata override '" + text + "': '" + value + "' is not a" + (type == "int" ? "n " : " ") + type);
    }
    return o;
}

std::string MetadataOverride::describe() const {
    std::string v;
    switch (type) {
        case Type::Int:
            v = std::to_string(i);
            break;
        case Type::Float: {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.17g", f);
            v = buf;
            break;
        }
        case Type::Bool:
            v = b ? "true" : "false";
            break;
        case Type::Str:
            v = s;
            break;
    }
    return key + "=" + type_name(type) + ":" + v;
}

GgufFile::~GgufFile() = default;

void GgufFile::open_other_parts(int count) {
    const std::string & first = parts_[0]->path;
    const std::string suffix = part_suffix(0, count);
    if (!ends_with(first, suffix)) {
        throw Error("model file '" + first + "' is the first of " + std::to_string(count) +
                    " parts, but its name does not end in '" + suffix +
                    "', so the other parts cannot be found (keep the names gguf-split gave them)");
    }
    const std::string prefix = first.substr(0, first.size() - suffix.size());
    for (int i = 1; i < count; ++i) {
        const std::string path = prefix + part_suffix(i, count);
        try {
            parts_.push_back(std::make_unique<Part>(path));
        } catch (const Error & e) {
            throw Error("model '" + first + "' is split into " + std::to_string(count) + " files: part " +
                        std::to_string(i + 1) + ": " + e.what());
        }
        gguf_context * g = parts_.back()->gguf.get();
        const int64_t no = split_key(g, "split.no"), n = split_key(g, "split.count");
        if (no != i || n != count) {
            const std::string says = no < 0 || n < 0
                                         ? "it has no split.no and split.count keys"
                                         : "it says it is part " + std::to_string(no + 1) + " of " + std::to_string(n);
            throw Error("model file '" + path + "' is not part " + std::to_string(i + 1) + " of " +
                        std::to_string(count) + " of '" + first + "': " + says);
        }
    }
}

// Adds a part's tensors, checking that each one's bytes are in the file (the
// reader checks only the header) and that no two parts hold the same name.
void GgufFile::index_tensors(const Part & part) {
    gguf_context * g = part.gguf.get();
    for (int64_t i = 0; i < gguf_get_n_tensors(g); ++i) {
        const char * name = gguf_get_tensor_name(g, i);
        const ggml_tensor * t = ggml_get_tensor(part.meta.get(), name);
        const uint64_t offset = gguf_get_data_offset(g) + gguf_get_tensor_offset(g, i);
        const uint64_t end = offset + ggml_nbytes(t);
        if (end > part.size) {
            throw Error("model file '" + part.path + "' is truncated: tensor '" + name + "' ends at byte " +
                        std::to_string(end) + " but the file has " + std::to_string(part.size) + " bytes");
        }
        if (!by_name_.emplace(name, tensors_.size()).second) {
            throw Error("model file '" + part.path + "': tensor '" + name + "' is also in '" +
                        tensors_[by_name_[name]].part->path + "'");
        }
        by_desc_.emplace(t, tensors_.size());
        tensors_.push_back(Tensor{t, &part, offset});
    }
}

const std::string & GgufFile::path() const {
    return parts_[0]->path;
}

uint64_t GgufFile::file_size() const {
    uint64_t n = 0;
    for (const auto & part : parts_) n += part->size;
    return n;
}

int64_t GgufFile::key_id(const std::string & key) const {
    return gguf_find_key(parts_[0]->gguf.get(), key.c_str());
}

bool GgufFile::has_key(const std::string & key) const {
    if (key_id(key) >= 0) return true;
    return std::any_of(overrides_.begin(), overrides_.end(), [&](const MetadataOverride & o) { return o.key == key; });
}

std::string GgufFile::get_string(const std::string & key) const {
    if (const MetadataOverride * o = override_of(key, MetadataOverride::Type::Str)) return o->s;
    const int64_t id = key_id(key);
    if (id < 0) throw Error("model file '" + path() + "' has no metadata key '" + key + "'");
    if (gguf_get_kv_type(parts_[0]->gguf.get(), id) != GGUF_TYPE_STRING) {
        throw Error("model file '" + path() + "': metadata key '" + key + "' is not a string");
    }
    return gguf_get_val_str(parts_[0]->gguf.get(), id);
}

std::string GgufFile::get_string(const std::string & key, const std::string & fallback) const {
    if (const MetadataOverride * o = override_of(key, MetadataOverride::Type::Str)) return o->s;
    return key_id(key) >= 0 ? get_string(key) : fallback;
}

int32_t GgufFile::as_int32(const std::string & key, int64_t v) const {
    if (v < INT32_MIN || v > INT32_MAX) {
        throw Error("model file '" + path() + "': " + key + " is " + std::to_string(v) + ", beyond a 32-bit integer");
    }
    return (int32_t) v;
}

int32_t GgufFile::get_int32(const std::string & key) const {
    return as_int32(key, get_int(key));
}

int32_t GgufFile::get_int32(const std::string & key, int64_t fallback) const {
    return as_int32(key, get_int(key, fallback));
}

int64_t GgufFile::get_int(const std::string & key) const {
    if (const MetadataOverride * o = override_of(key, MetadataOverride::Type::Int)) return o->i;
    const int64_t id = key_id(key);
    if (id < 0) throw Error("model file '" + path() + "' has no metadata key '" + key + "'");
    switch (gguf_get_kv_type(parts_[0]->gguf.get(), id)) {
        case GGUF_TYPE_UINT8:
            return gguf_get_val_u8(parts_[0]->gguf.get(), id);
        case GGUF_TYPE_INT8:
            return gguf_get_val_i8(parts_[0]->gguf.get(), id);
        case GGUF_TYPE_UINT16:
            return gguf_get_val_u16(parts_[0]->gguf.get(), id);
        case GGUF_TYPE_INT16:
            return gguf_get_val_i16(parts_[0]->gguf.get(), id);
        case GGUF_TYPE_UINT32:
            return gguf_get_val_u32(parts_[0]->gguf.get(), id);
        case GGUF_TYPE_INT32:
            return gguf_get_val_i32(parts_[0]->gguf.get(), id);
        case GGUF_TYPE_UINT64:
            return (int64_t) gguf_get_val_u64(parts_[0]->gguf.get(), id);
        case GGUF_TYPE_INT64:
            return gguf_get_val_i64(parts_[0]->gguf.get(), id);
        default:
            throw Error("model file '" + path() + "': metadata key '" + key +
                        "' is not an integer (per-layer arrays are not supported)");
    }
}

int64_t GgufFile::get_int(const std::string & key, int64_t fallback) const {
    if (const MetadataOverride * o = override_of(key, MetadataOverride::Type::Int)) return o->i;
    return key_id(key) >= 0 ? get_int(key) : fallback;
}

bool GgufFile::get_bool(const std::string & key, bool fallback) const {
    if (const MetadataOverride * o = override_of(key, MetadataOverride::Type::Bool)) return o->b;
    const int64_t id = key_id(key);
    if (id < 0) return fallback;
    if (gguf_get_kv_type(parts_[0]->gguf.get(), id) == GGUF_TYPE_BOOL)
        return gguf_get_val_bool(parts_[0]->gguf.get(), id);
    return get_int(key) != 0;
}

double GgufFile::get_float(const std::string & key) const {
    if (const MetadataOverride * o = override_of(key, MetadataOverride::Type::Float)) return o->f;
    const int64_t id = key_id(key);
    if (id < 0) throw Error("model file '" + path() + "' has no metadata key '" + key + "'");
    switch (gguf_get_kv_type(parts_[0]->gguf.get(), id)) {
        case GGUF_TYPE_FLOAT32:
            return gguf_get_val_f32(parts_[0]->gguf.get(), id);
        case GGUF_TYPE_FLOAT64:
            return gguf_get_val_f64(parts_[0]->gguf.get(), id);
        default:
            return (double) get_int(key);
    }
}

double GgufFile::get_float(const std::string & key, double fallback) const {
    if (const MetadataOverride * o = override_of(key, MetadataOverride::Type::Float)) return o->f;
    return key_id(key) >= 0 ? get_float(key) : fallback;
}

bool GgufFile::is_array(const std::string & key) const {
    const int64_t id = key_id(key);
    return id >= 0 && gguf_get_kv_type(parts_[0]->gguf.get(), id) == GGUF_TYPE_ARRAY;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string & key) const {
    gguf_context * g = parts_[0]->gguf.get();
    const int64_t id = key_id(key);
    if (id < 0) throw Error("model file '" + path() + "' has no metadata key '" + key + "'");
    if (gguf_get_kv_type(g, id) != GGUF_TYPE_ARRAY) {
        throw Error("model file '" + path() + "': metadata key '" + key + "' is not an array");
    }
    const size_t n = gguf_get_arr_n(g, id);
    const void * data = n ? gguf_get_arr_data(g, id) : nullptr;
    std::vector<int64_t> out(n);
    for (size_t i = 0; i < n; ++i) {
        switch (gguf_get_arr_type(g, id)) {
            case GGUF_TYPE_BOOL:
            case GGUF_TYPE_INT8:
                out[i] = static_cast<const int8_t *>(data)[i];
                break;
            case GGUF_TYPE_UINT8:
                out[i] = static_cast<const uint8_t *>(data)[i];
                break;
            case GGUF_TYPE_INT32:
                out[i] = static_cast<const int32_t *>(data)[i];
                break;
            case GGUF_TYPE_UINT32:
                out[i] = static_cast<const uint32_t *>(data)[i];
                break;
            default:
                throw Error("model file '" + path() + "': metadata key '" + key +
                            "' is not an array of integers or booleans");
        }
    }
    return out;
}

std::vector<std::string> GgufFile::get_string_array(const std::string & key) const {
    gguf_context * g = parts_[0]->gguf.get();
    const int64_t id = key_id(key);
    if (id < 0) throw Error("model file '" + path() + "' has no metadata key '" + key + "'");
    if (gguf_get_kv_type(g, id) != GGUF_TYPE_ARRAY || gguf_get_arr_type(g, id) != GGUF_TYPE_STRING) {
        throw Error("model file '" + path() + "': metadata key '" + key + "' is not an array of strings");
    }
    const size_t n = gguf_get_arr_n(g, id);
    std::vector<std::string> out;
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) out.emplace_back(gguf_get_arr_str(g, id, i));
    return out;
}

const ggml_tensor * GgufFile::find_tensor(const std::string & name) const {
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : tensors_[it->second].desc;
}

uint64_t GgufFile::header_digest() const {
    std::vector<uint8_t> bytes(1 << 20);
    // FNV-1a, and it stays so: saved slot files record this digest of their model.
    uint64_t h = 1469598103934665603ull;
    for (const auto & part : parts_) {
        const uint64_t n = gguf_get_data_offset(part->gguf.get());
        for (uint64_t at = 0; at < n;) {
            const size_t len = (size_t) std::min<uint64_t>(bytes.size(), n - at);
            part->read(at, bytes.data(), len);
            for (size_t i = 0; i < len; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
            at += len;
        }
    }
    return h;
}

GgufFile::DataRange GgufFile::part_data(int p) const {
    const Part & part = *parts_.at((size_t) p);
    return {gguf_get_data_offset(part.gguf.get()), part.size};
}

void GgufFile::read_part(int p, uint64_t at, void * dst, size_t n) const {
    parts_.at((size_t) p)->read(at, dst, n);
}

void GgufFile::read_tensor(const ggml_tensor * desc, uint64_t at, void * dst, size_t n) const {
    const auto it = by_desc_.find(desc);
    if (it == by_desc_.end())
        throw Error("model file '" + path() + "': no tensor '" + ggml_get_name(desc) + "' to read");
    const Tensor & t = tensors_[it->second];
    t.part->read(t.offset + at, dst, n);
}

}  // namespace llama_tp
