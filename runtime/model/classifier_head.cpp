#include "runtime/model/classifier_head.h"

#include "runtime/error.h"

#include "ggml.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace llama_tp {

namespace {

// A whole tensor of the file as floats (any type ggml converts to float).
std::vector<float> read_floats(const GgufFile & file, const ggml_tensor * t) {
    const ggml_type_traits * traits = ggml_get_type_traits(t->type);
    if (t->type != GGML_TYPE_F32 && traits->to_float == nullptr) {
        throw Error(std::string(t->name) + ": type " + ggml_type_name(t->type) + " cannot be read as floats");
    }
    std::vector<uint8_t> raw(ggml_nbytes(t));
    file.read_tensor(t, 0, raw.data(), raw.size());
    std::vector<float> out((size_t) ggml_nelements(t));
    if (t->type == GGML_TYPE_F32) {
        std::copy_n(reinterpret_cast<const float *>(raw.data()), out.size(), out.data());
    } else {
        traits->to_float(raw.data(), out.data(), (int64_t) out.size());
    }
    return out;
}

}  // namespace

std::vector<float> ClassifierHead::apply(const float * hidden) const {
    const int32_t n = n_out();
    std::vector<float> out(n);
    for (int32_t r = 0; r < n; ++r) {
        const float * w = weight.data() + (size_t) r * n_embd;
        double sum = 0.0;
        for (int32_t c = 0; c < n_embd; ++c) sum += (double) w[c] * hidden[c];
        out[r] = (float) sum + (bias.empty() ? 0.0f : bias[r]);
    }
    if (softmax && n > 0) {
        const float top = *std::max_element(out.begin(), out.end());
        float total = 0.0f;
        for (float & v : out) total += v = std::exp(v - top);
        for (float & v : out) v /= total;
    }
    return out;
}

std::optional<ClassifierHead> ClassifierHead::read(const GgufFile & file, const HParams & hp) {
    const ggml_tensor * w = file.find_tensor("cls.output.weight");
    if (w == nullptr) return std::nullopt;
    if (w->ne[0] != hp.n_embd || ggml_n_dims(w) > 2) {
        throw Error("cls.output.weight: expected rows of " + std::to_string(hp.n_embd) + " (n_embd), got " +
                    std::to_string(w->ne[0]) + " x " + std::to_string(w->ne[1]));
    }
    ClassifierHead head;
    head.n_embd = (int32_t) hp.n_embd;
    head.weight = read_floats(file, w);
    if (const ggml_tensor * b = file.find_tensor("cls.output.bias")) {
        if (ggml_nelements(b) != w->ne[1]) {
            throw Error("cls.output.bias: expected " + std::to_string(w->ne[1]) + " values, got " +
                        std::to_string(ggml_nelements(b)));
        }
        head.bias = read_floats(file, b);
    }
    head.last_token = hp.classify_last_token;
    head.softmax = hp.classify_last_token;
    return head;
}

}  // namespace llama_tp
