#include "tests/runtime/gguf_edit.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <vector>

#include "ggml.h"
#include "gguf.h"

namespace llama_tp::test {

void copy_gguf(const std::string & src, const std::string & dst, const std::function<void(gguf_context *)> & edit,
               const std::function<bool(const std::string &)> & keep,
               const std::function<void(ggml_context *)> & change_data) {
    ggml_context * data = nullptr;
    gguf_init_params params = {/*no_alloc =*/false, &data};
    gguf_context * in = gguf_init_from_file(src.c_str(), params);
    if (!in) throw std::runtime_error("cannot read " + src);
    if (change_data) change_data(data);
    gguf_context * out = gguf_init_empty();
    gguf_set_kv(out, in);
    for (int64_t i = 0; i < gguf_get_n_tensors(in); ++i) {
        const char * name = gguf_get_tensor_name(in, i);
        if (keep(name)) gguf_add_tensor(out, ggml_get_tensor(data, name));
    }
    if (edit) edit(out);
    if (!gguf_write_to_file(out, dst.c_str(), false)) throw std::runtime_error("cannot write " + dst);
    gguf_free(out);
    gguf_free(in);
    ggml_free(data);
}

void copy_gguf_with_value(const std::string & src, const std::string & dst, const std::string & name, int64_t i,
                          float value) {
    copy_gguf(
        src, dst, nullptr, [](const std::string &) { return true; },
        [&](ggml_context * data) {
            ggml_tensor * t = ggml_get_tensor(data, name.c_str());
            if (!t || t->type != GGML_TYPE_F32 || i >= ggml_nelements(t)) {
                throw std::runtime_error(src + " has no F32 tensor " + name + " of more than " + std::to_string(i) +
                                         " elements");
            }
            ((float *) t->data)[i] = value;
        });
}

void truncate_copy(const std::string & src, const std::string & dst, long n) {
    std::ifstream f(src, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    bytes.resize((size_t) n);
    std::ofstream(dst, std::ios::binary).write(bytes.data(), (std::streamsize) bytes.size());
}

std::string temp_path(const std::string & name) {
    const char * dir = std::getenv("TMPDIR");
    return std::string(dir ? dir : "/tmp") + "/llama-tp-test-" + std::to_string(::getpid()) + "-" + name;
}

}  // namespace llama_tp::test
