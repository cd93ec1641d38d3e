#pragma once
// A GGUF model opened for loading: its metadata (through ggml's GGUF reader),
// its tensor descriptions, and positioned reads of tensor bytes. A model split
// into several files (upstream's split.* keys and NAME-00001-of-0000N.gguf
// names) is opened from its first part and reads as one: metadata from the
// first part, each tensor from whichever part holds it. Every error names the
// file, and the key or tensor involved.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

struct gguf_context;
struct ggml_context;
struct ggml_tensor;

namespace llama_tp {

// A metadata value read in place of the file's (llama-server's --override-kv
// KEY=TYPE:VALUE): int, float, bool or str.
struct MetadataOverride {
    enum class Type { Int, Float, Bool, Str };
    std::string key;
    Type type = Type::Int;
    int64_t i = 0;
    double f = 0.0;
    bool b = false;
    std::string s;

    // KEY=TYPE:VALUE; throws llama_tp::Error saying what is wrong.
    static MetadataOverride parse(const std::string & text);
    std::string describe() const;  // KEY=TYPE:VALUE
};

class GgufFile {
  public:
    // overrides replace the file's values of their keys (or add keys); one
    // whose type differs from the file's value is dropped with a warning on
    // stderr, as upstream drops it.
    explicit GgufFile(const std::string & path, const std::vector<MetadataOverride> & overrides = {});
    ~GgufFile();
    GgufFile(const GgufFile &) = delete;
    GgufFile & operator=(const GgufFile &) = delete;

    const std::string & path() const;  // the first part's
    int n_parts() const { return (int) parts_.size(); }
    uint64_t file_size() const;  // all parts together

    bool has_key(const std::string & key) const;
    std::string get_string(const std::string & key) const;
    std::string get_string(const std::string & key, const std::string & fallback) const;
    int64_t get_int(const std::string & key) const;  // any integer type
    int64_t get_int(const std::string & key, int64_t fallback) const;
    // The same, refused (naming the key) beyond a 32-bit integer's range.
    int32_t get_int32(const std::string & key) const;
    int32_t get_int32(const std::string & key, int64_t fallback) const;
    // v, read from key, as a 32-bit integer; refused naming the key beyond its range.
    int32_t as_int32(const std::string & key, int64_t v) const;
    double get_float(const std::string & key) const;  // any numeric type
    double get_float(const std::string & key, double fallback) const;
    bool get_bool(const std::string & key, bool fallback) const;  // a bool, or an integer: not 0
    bool is_array(const std::string & key) const;
    std::vector<int64_t> get_int_array(const std::string & key) const;  // integer or bool elements
    std::vector<std::string> get_string_array(const std::string & key) const;

    // Description (type, shape; no data) of a tensor, nullptr when absent.
    const ggml_tensor * find_tensor(const std::string & name) const;
    int64_t n_tensors() const { return (int64_t) tensors_.size(); }
    const ggml_tensor * tensor_at(int64_t i) const { return tensors_[i].desc; }

    // A digest of every part's header and tensor table (every byte before
    // the data): two models with equal size and digest are the same model.
    uint64_t header_digest() const;

    // Part p's tensor data: bytes [begin, end) of its file, all after its header.
    struct DataRange {
        uint64_t begin = 0, end = 0;
    };
    DataRange part_data(int p) const;
    // Reads n bytes from byte `at` of part p's file; throws naming the part
    // on a short read.
    void read_part(int p, uint64_t at, void * dst, size_t n) const;
    // Reads n bytes from byte `at` of a tensor's data; throws naming the part
    // on a short read.
    void read_tensor(const ggml_tensor * desc, uint64_t at, void * dst, size_t n) const;

  private:
    struct Part;
    struct Tensor {
        const ggml_tensor * desc;
        const Part * part;
        uint64_t offset;  // of its data in the part
    };

    void open_other_parts(int n_parts);
    void index_tensors(const Part & part);
    int64_t key_id(const std::string & key) const;
    // The override of a key read as `wanted`; nullptr (with a warning) when it gives another type.
    const MetadataOverride * override_of(const std::string & key, MetadataOverride::Type wanted) const;
    void take_overrides(const std::vector<MetadataOverride> & overrides);

    std::vector<std::unique_ptr<Part>> parts_;
    std::vector<Tensor> tensors_;
    std::unordered_map<std::string, size_t> by_name_;
    std::unordered_map<const ggml_tensor *, size_t> by_desc_;  // reads name their tensor by description
    std::vector<MetadataOverride> overrides_;
};

}  // namespace llama_tp
