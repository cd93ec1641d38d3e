#pragma once
// The one way a ggml-ext operation carries its parameters: by value, in the
// op_params of a small named companion tensor that is the node's last
// source. They live as long as the graph's context, nothing is borrowed, and
// an executor reading the graph finds them by the companion's name (the
// collective node and the exact sums are found so).

#include <cstring>
#include <type_traits>

#include "ggml.h"

namespace ggml_ext {

// A companion tensor named `name` that holds params.
template <typename T>
ggml_tensor * op_params_tensor(ggml_context * ctx, const char * name, const T & params) {
    static_assert(std::is_trivially_copyable_v<T>, "parameters are copied bytewise");
    static_assert(sizeof(T) <= GGML_MAX_OP_PARAMS, "parameters must fit a tensor's op_params");
    ggml_tensor * t = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 1);
    ggml_set_name(t, name);
    std::memcpy(t->op_params, &params, sizeof(T));
    return t;
}

// node's last source where it is a companion named `name`, else nullptr.
inline const ggml_tensor * op_params_companion(const ggml_tensor * node, const char * name) {
    if (node->op != GGML_OP_CUSTOM) return nullptr;
    const ggml_tensor * last = nullptr;
    for (int j = 0; j < GGML_MAX_SRC && node->src[j]; ++j) last = node->src[j];
    return last && std::strcmp(last->name, name) == 0 ? last : nullptr;
}

// The parameters node's companion named `name` holds; false where it has none.
template <typename T>
bool op_params_of(const ggml_tensor * node, const char * name, T * out) {
    const ggml_tensor * c = op_params_companion(node, name);
    if (!c) return false;
    std::memcpy(out, c->op_params, sizeof(T));
    return true;
}

}  // namespace ggml_ext
