#include "tools/make-model/output/atomic_file.h"

#include "tools/make-model/spec/model_spec.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace llama_tp::make_model {

AtomicFile::AtomicFile(const std::string & path) : path_(path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        throw IoError("cannot write '" + path + "': it is a directory");
    }
    std::vector<char> name(path.begin(), path.end());
    const std::string suffix = ".tmp-XXXXXX";
    name.insert(name.end(), suffix.begin(), suffix.end());
    name.push_back('\0');
    const int fd = mkstemp(name.data());
    if (fd < 0) {
        throw IoError("cannot create '" + path + "': " + std::strerror(errno));
    }
    temp_path_ = name.data();
    // mkstemp creates the file private (0600); give it the usual umask-based mode.
    const mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    file_ = fdopen(fd, "wb");
    if (file_ == nullptr) {
        const int saved = errno;
        close(fd);
        std::remove(temp_path_.c_str());
        throw IoError("cannot open '" + temp_path_ + "': " + std::strerror(saved));
    }
}

AtomicFile::~AtomicFile() {
    if (file_ != nullptr) {
        std::fclose(file_);
    }
    if (!committed_) {
        std::remove(temp_path_.c_str());
    }
}

void AtomicFile::fail(const std::string & what) const {
    throw IoError("cannot " + what + " '" + temp_path_ + "': " + std::strerror(errno));
}

void AtomicFile::write(const void * data, size_t size) {
    if (size > 0 && std::fwrite(data, 1, size, file_) != size) {
        fail("write");
    }
    bytes_written_ += size;
}

void AtomicFile::write_zeros(size_t size) {
    static const char zeros[256] = {};
    while (size > 0) {
        const size_t n = size < sizeof(zeros) ? size : sizeof(zeros);
        write(zeros, n);
        size -= n;
    }
}

// No fsync: the rename already guarantees readers a complete file; surviving
// a machine crash is not a goal for generated test models.
void AtomicFile::commit() {
    FILE * file = file_;
    file_ = nullptr;
    if (std::fclose(file) != 0) {
        fail("close");
    }
    if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
        throw IoError("cannot rename '" + temp_path_ + "' to '" + path_ + "': " + std::strerror(errno));
    }
    committed_ = true;
}

}  // namespace llama_tp::make_model
