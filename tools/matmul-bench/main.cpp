// llama-tp-matmul-bench: q8_0, q4_0, K-quant (q4_K, q5_K, q6_K) or IQ4_XS products of ggml (ggml_mul_mat) against
// ggml-ext's one-pass kernel (ggml_ext_exact_matmul, one cell or the cells of
// a reduction grid), on the same weights and tokens. Each figure multiplies
// enough copies of the matrix that they do not fit in the CPU's caches, as a
// model's weights do not; best of seven timings, per matrix, with the rate
// the weights were read at.

#include "ggml-ext/ops/exact_matmul.h"

#include <algorithm>  // before args.h, which uses std::min and std::move
#include <utility>

#include "tools/common/args.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
    "usage: llama-tp-matmul-bench [options]\n"
    "  -t, --threads N      threads (default 2)\n"
    "  --type T             q8_0 (default), q4_0, q4_k, q5_k, q6_k or iq4_xs\n"
    "  --shape K,M          a matrix of M rows of K (default: the small and 1b\n"
    "                       presets' FFN and attention matrices and the output head)\n"
    "  --tokens N,N,...     tokens per product (default 1,4,8,64,512)\n"
    "  --cells N            the one-pass kernel's cells per row (default 1; the\n"
    "                       row-parallel matrices of split-invariant sums have ~10)\n"
    "  --bytes N            weight bytes multiplied per timing, in MiB (default 256)\n";

struct Shape {
    int64_t k, m;
};

struct Options {
    int threads = 2;
    ggml_type type = GGML_TYPE_Q8_0;
    std::vector<Shape> shapes;
    std::vector<int64_t> tokens{1, 4, 8, 64, 512};
    int64_t cells = 1;
    int64_t mib = 256;
};

Options parse(int argc, char ** argv) {
    Options o;
    ArgReader a(argc, argv, kUsage);
    while (!a.done()) {
        const std::string f = a.next();
        if (f == "-t" || f == "--threads") {
            o.threads = (int) a.integer(f, 1, 1024);
        } else if (f == "--type") {
            const std::string t = a.next();
            const ggml_type types[6] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K,
                                        GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS};
            const std::string names[6] = {"q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "iq4_xs"};
            const auto it = std::find(std::begin(names), std::end(names), t);
            if (it == std::end(names)) a.fail("--type takes q8_0, q4_0, q4_k, q5_k, q6_k or iq4_xs, not '" + t + "'");
            o.type = types[it - std::begin(names)];
        } else if (f == "--shape") {
            const std::vector<float> v = a.reals(f);
            if (v.size() != 2 || v[0] < 256 || v[1] < 1 || (int64_t) v[0] % 256 != 0) {
                a.fail("--shape takes K,M with K a multiple of 256 (q4_K blocks)");
            }
            o.shapes.push_back({(int64_t) v[0], (int64_t) v[1]});
        } else if (f == "--tokens") {
            o.tokens.clear();
            for (float t : a.reals(f)) {
                if (t < 1 || t > 4096) a.fail("--tokens takes counts from 1 to 4096");
                o.tokens.push_back((int64_t) t);
            }
        } else if (f == "--cells") {
            o.cells = a.integer(f, 1, 64);
        } else if (f == "--bytes") {
            o.mib = a.integer(f, 1, 1 << 16);
        } else if (f == "-h" || f == "--help") {
            a.help();
        } else {
            a.fail("unknown argument " + f);
        }
    }
    if (o.shapes.empty()) o.shapes = {{768, 3072}, {3072, 768}, {768, 768}, {1536, 6144}, {6144, 1536}, {768, 32000}};
    for (const Shape & s : o.shapes) {
        if (s.k / ggml_blck_size(o.type) < o.cells) {
            a.fail("--cells is more than a row of " + std::to_string(s.k) + " has blocks");
        }
    }
    return o;
}

// Copies of one random matrix, enough for `bytes` of weights.
struct Weights {
    ggml_context_ptr ctx;
    std::vector<ggml_tensor *> copies;
    Weights(const Shape & s, ggml_type type, int64_t bytes) {
        const size_t one = ggml_row_size(type, s.k) * (size_t) s.m;
        const int64_t n = std::max<int64_t>(1, bytes / (int64_t) one);
        ctx.reset(ggml_init({(size_t) n * (one + ggml_tensor_overhead()) + ggml_tensor_overhead(), nullptr, false}));
        std::mt19937 gen(1);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> values((size_t) (s.k * s.m));
        for (float & v : values) v = normal(gen);
        // Quantized once (IQ4_XS's quantizer searches for each block's scale: slow) and copied.
        for (int64_t i = 0; i < n; ++i) {
            ggml_tensor * w = ggml_new_tensor_2d(ctx.get(), type, s.k, s.m);
            if (i == 0) {
                ggml_quantize_chunk(type, values.data(), w->data, 0, s.m, s.k, nullptr);
            } else {
                std::memcpy(w->data, copies.front()->data, one);
            }
            copies.push_back(w);
        }
    }
};

// Seconds per matrix of products of every copy against T tokens: ggml's, or
// (one_pass) the one-pass kernel's over the cells of bounds (nullptr: one).
double seconds(const Weights & w, const Shape & s, int64_t T, bool one_pass, const int64_t * bounds, int threads) {
    const size_t n_ops = 3 * w.copies.size() + 8;
    ggml_context_ptr ops(ggml_init({ggml_tensor_overhead() * n_ops + ggml_graph_overhead_custom(n_ops, false), nullptr,
                                    /*no_alloc =*/true}));
    ggml_tensor * x = ggml_new_tensor_2d(ops.get(), GGML_TYPE_F32, s.k, T);
    ggml_set_input(x);
    ggml_cgraph * gf = ggml_new_graph_custom(ops.get(), n_ops, false);
    for (ggml_tensor * m : w.copies) {
        ggml_build_forward_expand(gf, one_pass ? ggml_ext_exact_matmul(ops.get(), m, x, bounds, GGML_TYPE_F32)
                                               : ggml_mul_mat(ops.get(), m, x));
    }
    ggml_gallocr_ptr alloc(ggml_gallocr_new(ggml_backend_cpu_buffer_type()));
    if (!ggml_gallocr_alloc_graph(alloc.get(), gf)) {
        std::fprintf(stderr, "llama-tp-matmul-bench: out of memory\n");
        std::exit(1);
    }
    std::mt19937 gen(2);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < ggml_nelements(x); ++i) static_cast<float *>(x->data)[i] = normal(gen);
    ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
    ggml_threadpool * pool = ggml_threadpool_new(&tpp);
    ggml_cplan plan = ggml_graph_plan(gf, threads, pool);
    std::vector<uint8_t> work(plan.work_size + 64);
    plan.work_data = work.data();
    ggml_graph_compute(gf, &plan);  // warm-up
    double best = 1e30;
    for (int timing = 0; timing < 7; ++timing) {
        const auto start = std::chrono::steady_clock::now();
        ggml_graph_compute(gf, &plan);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    ggml_threadpool_free(pool);
    return best / (double) w.copies.size();
}

// The cells of the one-pass kernel: evenly cut, on whole blocks (one: none).
std::vector<int64_t> cell_bounds(int64_t k, int64_t block, int64_t cells) {
    std::vector<int64_t> b;
    for (int64_t c = 0; c <= cells; ++c) b.push_back(k / block * c / cells * block);
    return b;
}

}  // namespace
}  // namespace llama_tp

int main(int argc, char ** argv) {
    using namespace llama_tp;
    const Options o = parse(argc, argv);
    std::printf("%s, one-pass kernel: %s, %lld cell(s) per row, %d threads\n", ggml_type_name(o.type),
                ggml_ext_exact_matmul_kernel(o.type), (long long) o.cells, o.threads);
    for (const Shape & s : o.shapes) {
        const Weights w(s, o.type, o.mib << 20);
        const std::vector<int64_t> bounds = cell_bounds(s.k, ggml_blck_size(o.type), o.cells);
        const double bytes = (double) ggml_row_size(o.type, s.k) * (double) s.m;
        for (int64_t T : o.tokens) {
            const double ggml = seconds(w, s, T, false, nullptr, o.threads);
            const double ours = seconds(w, s, T, true, o.cells > 1 ? bounds.data() : nullptr, o.threads);
            std::printf(
                "K %5lld, M %5lld, %4lld tokens: ggml %9.1f us (%5.1f GB/s), one-pass %9.1f us (%5.1f GB/s), "
                "ggml / one-pass %.2f\n",
                (long long) s.k, (long long) s.m, (long long) T, ggml * 1e6, bytes / ggml / 1e9, ours * 1e6,
                bytes / ours / 1e9, ggml / ours);
        }
    }
    return 0;
}
