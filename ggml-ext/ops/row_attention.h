#pragma once
// Attention computed row by row: for every query token, head and stream,
// the scores of its visible cells, a softmax and the weighted sum of their
// F16 values, in F32, eight cells at a time (head sizes that are not a
// multiple of 8 add a scalar tail). The same inputs as ggml_flash_attn_ext. Each row's result depends
// only on its own query, mask row and cells, so it is the same whichever
// other rows share the batch and however many threads run it. Past 2048
// cells a row's cells are taken in chunks, each with its own maximum,
// combined in cell order; a few decoded rows' chunks are spread over the
// threads (two graph nodes: the chunks' partial results, then the rows).
// (ggml's CPU kernel runs scalar code for F16
// rows shorter than its SIMD step, 128 on CPUs with AVX512-FP16: there a
// head size of 64 made attention the largest cost of batched decoding.)

#include "ggml.h"

extern "C" {

// q:    F32 [D, T, n_head, n_streams] (any strides; a permuted view is fine)
// k, v: F16 [D, n_kv, n_head_kv, n_streams], n_head a multiple of n_head_kv
// mask: F16 [n_kv, >= T, 1, n_streams]; -inf hides a cell, other values are
//       added to the scaled score
// sinks: F32 [n_head] or NULL: per head, a logit that joins every row's
//       softmax with no value (ggml_flash_attn_ext_add_sinks)
// softcap: 0, or scores become softcap * tanh(score / softcap) before the
//       mask is added (ggml_flash_attn_ext's logit_softcap)
// Returns F32 [D, n_head, T, n_streams], the layout of ggml_flash_attn_ext.
// A row whose cells are all hidden comes out as zeros.
struct ggml_tensor * ggml_ext_row_attention(struct ggml_context * ctx, struct ggml_tensor * q, struct ggml_tensor * k,
                                            struct ggml_tensor * v, struct ggml_tensor * mask,
                                            struct ggml_tensor * sinks, float scale, float softcap);
}
