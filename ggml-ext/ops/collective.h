#pragma once
// The collective graph node: ggml_cluster_allreduce(ctx, a, fn, user) is a
// node whose value is `a` summed element-wise across the caller's rank group.
// The sum is produced by a caller-registered callback, so ggml gains no
// dependency on any communication library. On backends that run custom ops
// (the CPU backend) the callback runs inside the graph, ordered after the
// producers of `a` and before its consumers, once per compute. Elsewhere the
// segment executor splits the graph at these nodes and calls the callback
// between segments.

#include <cstddef>

#include "ggml.h"

extern "C" {

// data: the node's n values of type (GGML_TYPE_F32, or GGML_TYPE_F64 for
// split-invariant sums), in the backend's memory;
// stream: the backend's stream where it has one, else NULL.
typedef void (*ggml_cluster_allreduce_fn)(void * user, void * data, enum ggml_type type, size_t n, void * stream);

// a must be a contiguous F32 or F64 tensor; the result is a view of it (in place).
struct ggml_tensor * ggml_cluster_allreduce(struct ggml_context * ctx, struct ggml_tensor * a,
                                            ggml_cluster_allreduce_fn fn, void * user);

// Whether node is a collective node; if so, fills fn and user.
bool ggml_cluster_allreduce_info(const struct ggml_tensor * node, ggml_cluster_allreduce_fn * fn, void ** user);
}
