#pragma once
// A file written under a temporary name beside its destination and renamed
// into place by commit(), so no reader ever sees a partial file. Dropped
// without commit(), the temporary file is removed.

#include <cstdint>
#include <cstdio>
#include <string>

namespace llama_tp::make_model {

class AtomicFile {
  public:
    explicit AtomicFile(const std::string & path);  // throws IoError
    ~AtomicFile();
    AtomicFile(const AtomicFile &) = delete;
    AtomicFile & operator=(const AtomicFile &) = delete;

    uint64_t bytes_written() const { return bytes_written_; }
    void write(const void * data, size_t size);  // throws IoError
    void write_zeros(size_t size);               // throws IoError
    void commit();                               // throws IoError

  private:
    [[noreturn]] void fail(const std::string & what) const;

    std::string path_;
    std::string temp_path_;
    FILE * file_ = nullptr;
    uint64_t bytes_written_ = 0;
    bool committed_ = false;
};

}  // namespace llama_tp::make_model
