#include "plugin/gguf_file.h"

#include <algorithm>
#include <vector>

#include "plugin/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ggml.h"
#include "gguf.h"

namespace llama_tp {

GgufFile::Fd::~Fd() {
    if (fd >= 0) ::close(fd);
}
void GgufFile::GgufDeleter::operator()(gguf_context * ctx) const {
    gguf_free(ctx);
}
void GgufFile::GgmlDeleter::operator()(ggml_context * ctx) const {
    ggml_free(ctx);
}

GgufFile::GgufFile(const std::string & path) : path_(path) {
    fd_.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_.fd < 0) {
        throw Error("cannot open model file '" + path + "': " + std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd_.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        throw Error("model file '" + path + "' is not a regular file");
    }
    file_size_ = (uint64_t) st.st_size;

    ggml_context * meta = nullptr;
    gguf_init_params params = {/*no_alloc =*/true, /*ctx =*/&meta};
    gguf_.reset(gguf_init_from_file(path.c_str(), params));
    meta_.reset(meta);
    if (!gguf_) {
        throw Error("'" + path + "' is not a valid GGUF file (bad magic, version or header, or truncated metadata)");
    }
    // The reader checks the header; make sure every tensor's bytes are in the file too.
    for (int64_t i = 0; i < n_tensors(); ++i) {
        const ggml_tensor * t = tensor_at(i);
        const uint64_t end = tensor_offset(t) + ggml_nbytes(t);
        if (end > file_size_) {
            throw Error("model file '" + path + "' is truncated: tensor '" + std::string(ggml_get_name(t)) +
                        "' ends at byte " + std::to_string(end) + " but the file has " + std::to_string(file_size_) +
                        " bytes");
        }
    }
}

int64_t GgufFile::key_id(const std::string & key) const {
    return gguf_find_key(gguf_.get(), key.c_str());
}

bool GgufFile::has_key(const std::string & key) const {
    return key_id(key) >= 0;
}

std::string GgufFile::get_string(const std::string & key) const {
    const int64_t id = key_id(key);
    if (id < 0) throw Error("model file '" + path_ + "' has no metadata key '" + key + "'");
    if (gguf_get_kv_type(gguf_.get(), id) != GGUF_TYPE_STRING) {
        throw Error("model file '" + path_ + "': metadata key '" + key + "' is not a string");
    }
    return gguf_get_val_str(gguf_.get(), id);
}

std::string GgufFile::get_string(const std::string & key, const std::string & fallback) const {
    return has_key(key) ? get_string(key) : fallback;
}

int64_t GgufFile::get_int(const std::string & key) const {
    const int64_t id = key_id(key);
    if (id < 0) throw Error("model file '" + path_ + "' has no metadata key '" + key + "'");
    switch (gguf_get_kv_type(gguf_.get(), id)) {
        case GGUF_TYPE_UINT8:
            return gguf_get_val_u8(gguf_.get(), id);
        case GGUF_TYPE_INT8:
            return gguf_get_val_i8(gguf_.get(), id);
        case GGUF_TYPE_UINT16:
            return gguf_get_val_u16(gguf_.get(), id);
        case GGUF_TYPE_INT16:
            return gguf_get_val_i16(gguf_.get(), id);
        case GGUF_TYPE_UINT32:
            return gguf_get_val_u32(gguf_.get(), id);
        case GGUF_TYPE_INT32:
            return gguf_get_val_i32(gguf_.get(), id);
        case GGUF_TYPE_UINT64:
            return (int64_t) gguf_get_val_u64(gguf_.get(), id);
        case GGUF_TYPE_INT64:
            return gguf_get_val_i64(gguf_.get(), id);
        default:
            throw Error("model file '" + path_ + "': metadata key '" + key +
                        "' is not an integer (per-layer arrays are not supported)");
    }
}

int64_t GgufFile::get_int(const std::string & key, int64_t fallback) const {
    return has_key(key) ? get_int(key) : fallback;
}

double GgufFile::get_float(const std::string & key) const {
    const int64_t id = key_id(key);
    if (id < 0) throw Error("model file '" + path_ + "' has no metadata key '" + key + "'");
    switch (gguf_get_kv_type(gguf_.get(), id)) {
        case GGUF_TYPE_FLOAT32:
            return gguf_get_val_f32(gguf_.get(), id);
        case GGUF_TYPE_FLOAT64:
            return gguf_get_val_f64(gguf_.get(), id);
        default:
            return (double) get_int(key);
    }
}

double GgufFile::get_float(const std::string & key, double fallback) const {
    return has_key(key) ? get_float(key) : fallback;
}

const ggml_tensor * GgufFile::find_tensor(const std::string & name) const {
    return ggml_get_tensor(meta_.get(), name.c_str());
}

int64_t GgufFile::n_tensors() const {
    return gguf_get_n_tensors(gguf_.get());
}

const ggml_tensor * GgufFile::tensor_at(int64_t i) const {
    return ggml_get_tensor(meta_.get(), gguf_get_tensor_name(gguf_.get(), i));
}

uint64_t GgufFile::header_digest() const {
    const uint64_t n = gguf_get_data_offset(gguf_.get());
    std::vector<uint8_t> bytes(1 << 20);
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (uint64_t at = 0; at < n;) {
        const size_t len = (size_t) std::min<uint64_t>(bytes.size(), n - at);
        read(at, bytes.data(), len);
        for (size_t i = 0; i < len; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
        at += len;
    }
    return h;
}

uint64_t GgufFile::tensor_offset(const ggml_tensor * desc) const {
    const int64_t id = gguf_find_tensor(gguf_.get(), ggml_get_name(desc));
    return gguf_get_data_offset(gguf_.get()) + gguf_get_tensor_offset(gguf_.get(), id);
}

void GgufFile::read(uint64_t offset, void * dst, size_t n) const {
    auto * out = static_cast<char *>(dst);
    while (n > 0) {
        const ssize_t got = ::pread(fd_.fd, out, n, (off_t) offset);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            throw Error("reading model file '" + path_ + "' at byte " + std::to_string(offset) +
                        " failed: " + (got == 0 ? std::string("unexpected end of file") : std::strerror(errno)));
        }
        out += got;
        offset += (uint64_t) got;
        n -= (size_t) got;
    }
}

}  // namespace llama_tp
