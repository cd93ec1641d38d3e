#include "runtime/model/control_vector.h"

#include "runtime/error.h"
#include "runtime/model/gguf_file.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "ggml.h"

namespace llama_tp {

namespace {

// N of "direction.N", or -1 when the name is not one.
int32_t direction_layer(const std::string & name) {
    const std::string prefix = "direction.";
    if (name.compare(0, prefix.size(), prefix) != 0 || name.size() == prefix.size()) return -1;
    char * end = nullptr;
    const long n = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (*end != '\0' || n < 0 || n > 1 << 20) return -1;
    return (int32_t) n;
}

}  // namespace

ControlVector::ControlVector(const std::vector<ControlVectorOptions> & files, int32_t n_layer, int64_t n_embd,
                             ControlVectorRange range)
    : layers_((size_t) n_layer) {
    const int32_t first = range.first > 0 ? range.first : 1;
    const int32_t last = range.last > 0 ? range.last : n_layer;
    std::vector<float> row((size_t) n_embd);
    for (const ControlVectorOptions & f : files) {
        std::unique_ptr<GgufFile> opened;
        try {
            opened = std::make_unique<GgufFile>(f.path);
        } catch (const Error & e) {
            throw Error("control vector: " + std::string(e.what()));
        }
        const GgufFile & file = *opened;
        if (file.n_tensors() == 0) throw Error("control vector '" + f.path + "': no direction tensors");
        for (int64_t i = 0; i < file.n_tensors(); ++i) {
            const ggml_tensor * t = file.tensor_at(i);
            const std::string name = ggml_get_name(t);
            const std::string what = "control vector '" + f.path + "': tensor '" + name + "'";
            const int32_t il = direction_layer(name);
            if (il < 1) throw Error(what + " is not direction.N with a layer N >= 1");
            if (t->type != GGML_TYPE_F32) throw Error(what + " is " + ggml_type_name(t->type) + ", not f32");
            if (ggml_n_dims(t) != 1 || t->ne[0] != n_embd) {
                throw Error(what + " has " + std::to_string(ggml_nelements(t)) + " elements in " +
                            std::to_string(ggml_n_dims(t)) + " dimensions; the model's hidden state has " +
                            std::to_string(n_embd));
            }
            // Upstream keeps none for layers past the last-but-one.
            if (il >= n_layer) {
                std::fprintf(stderr, "llama-tp: %s: the model has %d layers; it adds nothing\n", what.c_str(), n_layer);
                continue;
            }
            if (il < first || il > last) continue;
            file.read_tensor(t, 0, row.data(), row.size() * sizeof(float));
            std::vector<float> & dst = layers_[(size_t) il];
            dst.resize((size_t) n_embd, 0.0f);
            for (size_t j = 0; j < row.size(); ++j) dst[j] += row[j] * f.scale;
        }
    }
}

const float * ControlVector::layer(int32_t il) const {
    if (il < 0 || (size_t) il >= layers_.size() || layers_[(size_t) il].empty()) return nullptr;
    return layers_[(size_t) il].data();
}

bool ControlVector::empty() const {
    for (const auto & l : layers_) {
        if (!l.empty()) return false;
    }
    return true;
}

std::string ControlVector::describe() const {
    // A digest of the values: equal directions give equal text.
    uint64_t h = 1469598103934665603ull;
    std::string layers;
    for (size_t il = 0; il < layers_.size(); ++il) {
        if (layers_[il].empty()) continue;
        layers += (layers.empty() ? "" : ",") + std::to_string(il);
        for (float x : layers_[il]) {
            uint32_t bits;
            static_assert(sizeof bits == sizeof x);
            std::memcpy(&bits, &x, sizeof bits);
            h = (h ^ bits) * 1099511628211ull;
        }
    }
    char digest[32];
    std::snprintf(digest, sizeof digest, "%016llx", (unsigned long long) h);
    return "control vector: layers " + (layers.empty() ? std::string("none") : layers) + ", digest " + digest;
}

}  // namespace llama_tp
