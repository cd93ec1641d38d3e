// llama-tp-attention-bench: llama-tp's row attention against ggml's flash
// attention on the same inputs (F16 cache, F32 queries, a causal mask): a
// prompt of -p tokens over its own cells, and one decode token at depth -d,
// for the head shapes of the generated presets and any given with --shape.
// Best of seven timings of each, in ms, and their ratio.

#include "ggml-ext/ops/row_attention.h"

#include <algorithm>  // before args.h, which uses std::min and std::move
#include <utility>

#include "tools/common/args.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-cpp.h"
#include "ggml-cpu.h"
#include "ggml.h"

namespace llama_tp {
namespace {

const char * kUsage =
    "usage: llama-tp-attention-bench [options]\n"
    "  -t, --threads N   threads (default 2)\n"
    "  -p N              prompt tokens of the prefill shapes (default 512)\n"
    "  -d N              cells before the decode token (default 1000)\n"
    "  --shape H,K,D     query heads, KV heads, head size (default: those of the\n"
    "                    small and 1b presets and two grouped-query shapes)\n";

struct Shape {
    int n_head, n_head_kv, head_dim;
};

struct Options {
    int threads = 2;
    int n_prompt = 512;
    int depth = 1000;
    std::vector<Shape> shapes;
};

Options parse(int argc, char ** argv) {
    Options o;
    ArgReader a(argc, argv, kUsage);
    while (!a.done()) {
        const std::string f = a.next();
        if (f == "-t" || f == "--threads") {
            o.threads = (int) a.integer(f, 1, 1024);
        } else if (f == "-p") {
            o.n_prompt = (int) a.integer(f, 1, 1 << 16);
        } else if (f == "-d") {
            o.depth = (int) a.integer(f, 0, 1 << 20);
        } else if (f == "--shape") {
            const std::vector<float> v = a.reals(f);
            if (v.size() != 3 || v[0] < 1 || v[1] < 1 || v[2] < 8 || (int) v[0] % (int) v[1] != 0) {
                a.fail("--shape takes H,K,D with H a multiple of K and D >= 8");
            }
            o.shapes.push_back({(int) v[0], (int) v[1], (int) v[2]});
        } else if (f == "-h" || f == "--help") {
            a.help();
        } else {
            a.fail("unknown argument " + f);
        }
    }
    if (o.shapes.empty()) o.shapes = {{12, 12, 64}, {24, 12, 64}, {32, 8, 64}, {8, 8, 128}};
    return o;
}

// Seconds per call of one attention op over T queries and n_kv cells, the
// last T of them the queries' own (causal), best of seven timings.
double seconds(const Shape & s, int T, int n_kv, bool row, int threads) {
    const size_t bytes = ggml_tensor_overhead() * 8 + (size_t) s.head_dim * T * s.n_head * 4 +
                         2 * (size_t) s.head_dim * n_kv * s.n_head_kv * 2 + (size_t) n_kv * T * 2 + (1 << 20);
    ggml_context_ptr ctx(ggml_init({bytes, nullptr, false}));
    ggml_tensor * q = ggml_new_tensor_4d(ctx.get(), GGML_TYPE_F32, s.head_dim, T, s.n_head, 1);
    // As in the model's cache: one row of all KV heads per cell, viewed per head.
    auto cache = [&] {
        ggml_tensor * stored = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F16, (int64_t) s.head_dim * s.n_head_kv, n_kv);
        return ggml_view_4d(ctx.get(), stored, s.head_dim, n_kv, s.n_head_kv, 1, stored->nb[1],
                            ggml_row_size(GGML_TYPE_F16, s.head_dim), ggml_nbytes(stored), 0);
    };
    ggml_tensor * k = cache();
    ggml_tensor * v = cache();
    ggml_tensor * mask = ggml_new_tensor_4d(ctx.get(), GGML_TYPE_F16, n_kv, T, 1, 1);
    std::mt19937 gen(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < ggml_nelements(q); ++i) static_cast<float *>(q->data)[i] = normal(gen);
    for (ggml_tensor * t : {k, v}) {
        for (int64_t i = 0; i < ggml_nelements(t); ++i) {
            static_cast<ggml_fp16_t *>(t->data)[i] = ggml_fp32_to_fp16(normal(gen));
        }
    }
    for (int t = 0; t < T; ++t) {
        for (int c = 0; c < n_kv; ++c) {
            static_cast<ggml_fp16_t *>(mask->data)[(size_t) t * n_kv + c] =
                ggml_fp32_to_fp16(c <= n_kv - T + t ? 0.0f : -INFINITY);
        }
    }
    // The op's own tensors (however many it makes) go into a buffer of the
    // graph allocator's.
    const size_t n_ops = 16;
    ggml_context_ptr ops(ggml_init({ggml_tensor_overhead() * n_ops + ggml_graph_overhead_custom(n_ops, false), nullptr,
                                    /*no_alloc =*/true}));
    const float scale = 1.0f / std::sqrt((float) s.head_dim);
    ggml_tensor * out = nullptr;
    if (row) {
        out = ggml_ext_row_attention(ops.get(), q, k, v, mask, nullptr, scale, 0.0f);
    } else {
        out = ggml_flash_attn_ext(ops.get(), q, k, v, mask, scale, 0.0f, 0.0f);
        ggml_prec_set_acc(out, GGML_PREC_F32);
    }
    ggml_cgraph * gf = ggml_new_graph_custom(ops.get(), n_ops, false);
    ggml_build_forward_expand(gf, out);
    ggml_gallocr_ptr alloc(ggml_gallocr_new(ggml_backend_cpu_buffer_type()));
    if (!ggml_gallocr_alloc_graph(alloc.get(), gf)) {
        std::fprintf(stderr, "llama-tp-attention-bench: out of memory\n");
        std::exit(1);
    }
    ggml_cplan plan = ggml_graph_plan(gf, threads, nullptr);
    std::vector<uint8_t> work(plan.work_size + 64);
    plan.work_data = work.data();
    ggml_graph_compute(gf, &plan);  // warm-up
    // About 0.2 s per timing.
    const auto t0 = std::chrono::steady_clock::now();
    ggml_graph_compute(gf, &plan);
    const double once = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int calls = std::max(1, (int) (0.2 / std::max(once, 1e-6)));
    double best = 1e30;
    for (int timing = 0; timing < 7; ++timing) {
        const auto start = std::chrono::steady_clock::now();
        for (int c = 0; c < calls; ++c) ggml_graph_compute(gf, &plan);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls);
    }
    return best;
}

void report(const char * what, const Shape & s, int T, int n_kv, int threads) {
    const double row = seconds(s, T, n_kv, true, threads), ggml = seconds(s, T, n_kv, false, threads);
    std::printf(
        "%-8s heads %2d / %2d, size %3d, %4d queries over %5d cells: row %8.3f ms, ggml %8.3f ms, "
        "ggml / row %.2f\n",
        what, s.n_head, s.n_head_kv, s.head_dim, T, n_kv, row * 1e3, ggml * 1e3, ggml / row);
}

}  // namespace
}  // namespace llama_tp

int main(int argc, char ** argv) {
    using namespace llama_tp;
    const Options o = parse(argc, argv);
    for (const Shape & s : o.shapes) report("prefill", s, o.n_prompt, o.n_prompt, o.threads);
    for (const Shape & s : o.shapes) report("decode", s, 1, o.depth + 1, o.threads);
    return 0;
}
