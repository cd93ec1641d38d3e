#include "ggml-ext/exec/graph_fingerprint.h"

#include <cstring>

namespace llama_tp {

void graph_fingerprint(ggml_cgraph * gf, std::vector<int64_t> & out) {
    const int n = ggml_graph_n_nodes(gf);
    out.clear();
    out.push_back(n);
    for (int i = 0; i < n; ++i) {
        const ggml_tensor * t = ggml_graph_node(gf, i);
        out.push_back(t->op);
        out.push_back(t->type);
        out.push_back((int64_t) (intptr_t) t->data);
        for (int d = 0; d < GGML_MAX_DIMS; ++d) {
            out.push_back(t->ne[d]);
            out.push_back((int64_t) t->nb[d]);
        }
        int64_t params[GGML_MAX_OP_PARAMS / sizeof(int64_t)];
        std::memcpy(params, t->op_params, sizeof params);
        out.insert(out.end(), params, params + GGML_MAX_OP_PARAMS / sizeof(int64_t));
        for (int s = 0; s < GGML_MAX_SRC; ++s) {
            const ggml_tensor * src = t->src[s];
            out.push_back(src ? (int64_t) (intptr_t) src->data : 0);
            // A source made by another node is that node's entry; the others
            // (inputs, weights, the tags of ggml-ext's nodes, which keep the
            // collective's call or the exact sum's kind in their first
            // parameters) count here.
            if (!src || src->op != GGML_OP_NONE) continue;
            out.push_back(src->type);
            for (int d = 0; d < GGML_MAX_DIMS; ++d) out.push_back(src->ne[d]);
            int64_t first[2];
            std::memcpy(first, src->op_params, sizeof first);
            out.insert(out.end(), first, first + 2);
        }
    }
}

}  // namespace llama_tp
