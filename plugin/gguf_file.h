#pragma once
// A GGUF file opened for loading: its metadata (through ggml's GGUF reader),
// its tensor descriptions, and positioned reads of tensor bytes. Every error
// names the file, and the key or tensor involved.

#include <cstdint>
#include <memory>
#include <string>

struct gguf_context;
struct ggml_context;
struct ggml_tensor;

namespace llama_tp {

class GgufFile {
  public:
    explicit GgufFile(const std::string & path);
    ~GgufFile() = default;
    GgufFile(const GgufFile &) = delete;
    GgufFile & operator=(const GgufFile &) = delete;

    const std::string & path() const { return path_; }
    uint64_t file_size() const { return file_size_; }

    bool has_key(const std::string & key) const;
    std::string get_string(const std::string & key) const;
    std::string get_string(const std::string & key, const std::string & fallback) const;
    int64_t get_int(const std::string & key) const;  // any integer type
    int64_t get_int(const std::string & key, int64_t fallback) const;
    double get_float(const std::string & key) const;  // any numeric type
    double get_float(const std::string & key, double fallback) const;

    // Description (type, shape; no data) of a tensor, nullptr when absent.
    const ggml_tensor * find_tensor(const std::string & name) const;
    int64_t n_tensors() const;
    const ggml_tensor * tensor_at(int64_t i) const;

    // A digest of the header and tensor table (every byte before the data):
    // two files with equal size and digest hold the same model.
    uint64_t header_digest() const;

    // Absolute file offset of a tensor's data.
    uint64_t tensor_offset(const ggml_tensor * desc) const;
    // Reads n bytes at an absolute offset; throws on a short read.
    void read(uint64_t offset, void * dst, size_t n) const;

  private:
    int64_t key_id(const std::string & key) const;

    struct Fd {
        int fd = -1;
        ~Fd();
    };
    struct GgufDeleter {
        void operator()(gguf_context * ctx) const;
    };
    struct GgmlDeleter {
        void operator()(ggml_context * ctx) const;
    };

    std::string path_;
    Fd fd_;
    uint64_t file_size_ = 0;
    std::unique_ptr<ggml_context, GgmlDeleter> meta_;
    std::unique_ptr<gguf_context, GgufDeleter> gguf_;
};

}  // namespace llama_tp
