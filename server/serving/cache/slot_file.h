#pragma once
// A saved slot (--slot-save-path, POST /slots/{id}?action=save): the tokens
// its KV cells hold and the cells themselves, as an image in the whole
// model's head layout (runtime/kv/kv_image.h), so that any --tp / -ts of the same
// model and cache types restores it. The file names the model (size and
// header digest) and what its cells depend on besides it (ModelInfo::kv_format:
// RoPE as applied, cache types, sliding-window cells), and ends with a
// checksum; a file from another model or format, or a truncated or corrupt
// one, is refused before anything is restored.

#include "runtime/engine_options.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace llama_tp::server {

struct SlotImage {
    uint64_t model_size = 0;
    uint64_t model_digest = 0;
    KvTypes kv_types;
    std::string kv_format;  // empty in files of version 1, which did not record it
    std::vector<int32_t> tokens;
    std::vector<uint8_t> kv;
};

// What is wrong with a slot file: the message says which file and why.
class SlotFileError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// Writes through a temporary file renamed into place, so that a failed write
// leaves no partial file. Returns the bytes written. Throws SlotFileError.
size_t write_slot_file(const std::string & path, const SlotImage & image);

// Throws SlotFileError for a missing, foreign, truncated or corrupt file.
SlotImage read_slot_file(const std::string & path);

// A file name under --slot-save-path: not empty, no directories, no leading
// dot, printable. Returns "" when acceptable, else why not.
std::string slot_file_name_problem(const std::string & name);

}  // namespace llama_tp::server
