#include "server/serving/cache/slot_file.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace llama_tp::server {

namespace {

constexpr char kMagic[8] = {'L', 'T', 'P', 'S', 'L', 'O', 'T', '\0'};
constexpr uint32_t kVersion = 2;  // 2 added kv_format; 1 is still read

uint64_t fnv1a(const uint8_t * data, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) {
        h ^= data[i];
        h *= 1099511628211ull;
    }
    return h;
}

class Out {
  public:
    template <typename T>
    void put(const T & v) {
        put_bytes(&v, sizeof v);
    }
    void put_bytes(const void * p, size_t n) {
        const auto * b = static_cast<const uint8_t *>(p);
        bytes.insert(bytes.end(), b, b + n);
    }
    std::vector<uint8_t> bytes;
};

class In {
  public:
    In(const std::vector<uint8_t> & b, const std::string & path) : b_(b), path_(path) {}
    template <typename T>
    T get() {
        T v;
        get_bytes(&v, sizeof v);
        return v;
    }
    void get_bytes(void * p, size_t n) {
        if (b_.size() - at_ < n) throw SlotFileError("slot file '" + path_ + "' is truncated");
        std::memcpy(p, b_.data() + at_, n);
        at_ += n;
    }
    size_t left() const { return b_.size() - at_; }

  private:
    const std::vector<uint8_t> & b_;
    const std::string & path_;
    size_t at_ = 0;
};

}  // namespace

size_t write_slot_file(const std::string & path, const SlotImage & image) {
    Out o;
    o.put_bytes(kMagic, sizeof kMagic);
    o.put(kVersion);
    o.put(image.model_size);
    o.put(image.model_digest);
    o.put((int32_t) image.kv_types.k);
    o.put((int32_t) image.kv_types.v);
    o.put((uint64_t) image.kv_format.size());
    o.put_bytes(image.kv_format.data(), image.kv_format.size());
    o.put((uint64_t) image.tokens.size());
    o.put_bytes(image.tokens.data(), image.tokens.size() * sizeof(int32_t));
    o.put((uint64_t) image.kv.size());
    o.put_bytes(image.kv.data(), image.kv.size());
    o.put(fnv1a(o.bytes.data(), o.bytes.size()));

    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) throw SlotFileError("cannot write slot file '" + tmp + "'");
        f.write(reinterpret_cast<const char *>(o.bytes.data()), (std::streamsize) o.bytes.size());
        f.flush();
        if (!f) {
            std::remove(tmp.c_str());
            throw SlotFileError("writing slot file '" + tmp + "' failed (disk full?)");
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw SlotFileError("cannot rename '" + tmp + "' to '" + path + "'");
    }
    return o.bytes.size();
}

SlotImage read_slot_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw SlotFileError("no slot file '" + path + "'");
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    In in(bytes, path);
    char magic[sizeof kMagic];
    in.get_bytes(magic, sizeof magic);
    if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) throw SlotFileError("'" + path + "' is not a slot file");
    const uint32_t version = in.get<uint32_t>();
    if (version != kVersion && version != 1) {
        throw SlotFileError("slot file '" + path + "' has version " + std::to_string(version) + ", this server reads " +
                            std::to_string(kVersion));
    }
    SlotImage image;
    image.model_size = in.get<uint64_t>();
    image.model_digest = in.get<uint64_t>();
    image.kv_types.k = (ggml_type) in.get<int32_t>();
    image.kv_types.v = (ggml_type) in.get<int32_t>();
    if (version >= 2) {
        const uint64_t n_format = in.get<uint64_t>();
        if (n_format > in.left()) throw SlotFileError("slot file '" + path + "' is truncated");
        image.kv_format.resize(n_format);
        in.get_bytes(image.kv_format.data(), n_format);
    }
    const uint64_t n_tokens = in.get<uint64_t>();
    if (n_tokens > in.left() / sizeof(int32_t)) throw SlotFileError("slot file '" + path + "' is truncated");
    image.tokens.resize(n_tokens);
    in.get_bytes(image.tokens.data(), n_tokens * sizeof(int32_t));
    const uint64_t n_kv = in.get<uint64_t>();
    if (n_kv > in.left()) throw SlotFileError("slot file '" + path + "' is truncated");
    image.kv.resize(n_kv);
    in.get_bytes(image.kv.data(), n_kv);
    const size_t covered = bytes.size() - in.left();
    const uint64_t stored = in.get<uint64_t>();
    if (in.left() != 0) {
        throw SlotFileError("slot file '" + path + "' has " + std::to_string(in.left()) + " bytes after its end");
    }
    if (fnv1a(bytes.data(), covered) != stored) {
        throw SlotFileError("slot file '" + path + "' is corrupt (checksum mismatch)");
    }
    return image;
}

std::string slot_file_name_problem(const std::string & name) {
    if (name.empty()) return "is empty";
    if (name.size() > 255) return "is longer than 255 bytes";
    if (name[0] == '.') return "starts with a dot";
    for (unsigned char c : name) {
        if (c == '/' || c == '\\') return "names a directory (give a file name only)";
        if (c < 0x20 || c == 0x7f) return "holds a control character";
    }
    return "";
}

}  // namespace llama_tp::server
