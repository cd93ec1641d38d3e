// A model file's header, metadata and tensor table as the loader reads
// them: any bytes either open as a model whose hyperparameters are read, or
// are refused with llama_tp::Error; nothing crashes, hangs or reads out of
// bounds.
#include "runtime/error.h"
#include "runtime/model/gguf_file.h"
#include "runtime/model/hparams.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "ggml.h"

namespace {

// The bytes as a file of their own, in memory: the loader opens paths.
class MemoryFile {
  public:
    MemoryFile(const uint8_t * data, size_t size) : fd_(memfd_create("fuzz.gguf", MFD_CLOEXEC)) {
        if (fd_ < 0) return;
        for (size_t at = 0; at < size;) {
            const ssize_t n = write(fd_, data + at, size - at);
            if (n <= 0) break;
            at += (size_t) n;
        }
    }
    ~MemoryFile() {
        if (fd_ >= 0) close(fd_);
    }
    MemoryFile(const MemoryFile &) = delete;
    MemoryFile & operator=(const MemoryFile &) = delete;
    bool ok() const { return fd_ >= 0; }
    std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

  private:
    int fd_;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    ggml_log_set([](ggml_log_level, const char *, void *) {}, nullptr);  // gguf's refusals, thousands a second
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const MemoryFile file(data, size);
    if (!file.ok()) return 0;
    try {
        const llama_tp::GgufFile gguf(file.path());
        (void) gguf.header_digest();
        const llama_tp::HParams hp = llama_tp::read_hparams(gguf);
        (void) hp;
    } catch (const llama_tp::Error &) {
    }
    return 0;
}
