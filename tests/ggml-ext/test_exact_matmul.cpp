// ggml_ext_exact_matmul on the CPU: the cells of a split add up to the whole
// matrix's result, every output is the same whatever batch or thread count
// computes it, the result is the product it should be, and every path of
// every kernel (q8_0, q4_0, q4_K, q5_K, q6_K, IQ4_XS) this build has, and
// their panels, give the scalar path's bits.

#include "ggml-ext/ops/exact_matmul.h"
#include "ggml-ext/ops/exact_sum.h"
#include "ggml-ext/ops/iq4_xs_cells.h"
#include "ggml-ext/ops/q4_k_cells.h"
#include "ggml-ext/ops/q6_k_cells.h"
#include "ggml-ext/ops/q8_0_cells.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "ggml-cpu.h"
#include "ggml.h"

namespace {

// 37 rows: a partial tile for every thread count; 19 tokens: the panels of
// q4_K, q5_K and IQ4_XS (from 16 tokens) beside the tiles.
constexpr int64_t kK = 1536, kM = 37, kT = 19;

// A type the product takes, with uneven cells as the reduction grid's are
// (down to two q8_0 blocks, one K-quant block), and the same cells held by two
// ranks: the first two by one (first), the rest by the other (second).
struct TypeCase {
    ggml_type type;
    std::vector<int64_t> bounds, first, second;
};

const TypeCase kQ8_0{GGML_TYPE_Q8_0, {0, 256, 768, 832, 1536}, {0, 256, 768}, {0, 64, 768}};
const TypeCase kQ4_K{GGML_TYPE_Q4_K, {0, 256, 768, 1280, 1536}, {0, 256, 768}, {0, 512, 768}};
const TypeCase kQ5_K{GGML_TYPE_Q5_K, {0, 256, 768, 1280, 1536}, {0, 256, 768}, {0, 512, 768}};
const TypeCase kQ6_K{GGML_TYPE_Q6_K, {0, 256, 768, 1280, 1536}, {0, 256, 768}, {0, 512, 768}};
const TypeCase kQ4_0{GGML_TYPE_Q4_0, {0, 256, 768, 832, 1536}, {0, 256, 768}, {0, 64, 768}};
const TypeCase kIQ4_XS{GGML_TYPE_IQ4_XS, {0, 256, 768, 1280, 1536}, {0, 256, 768}, {0, 512, 768}};

class ExactMatmul : public testing::TestWithParam<TypeCase> {};

std::string type_name(const testing::TestParamInfo<TypeCase> & info) {
    return ggml_type_name(info.param.type);
}

struct Context {
    ggml_context * ctx;
    Context() {
        ggml_init_params params = {256u << 20, nullptr, false};
        ctx = ggml_init(params);
    }
    ~Context() { ggml_free(ctx); }
};

std::vector<float> random_values(int64_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> value(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float & x : v) x = value(rng);
    return v;
}

// W [K, M] of the type from float values, and columns [begin, end) of it.
ggml_tensor * matrix(ggml_context * ctx, const std::vector<float> & values, ggml_type type) {
    ggml_tensor * w = ggml_new_tensor_2d(ctx, type, kK, kM);
    ggml_quantize_chunk(type, values.data(), w->data, 0, kM, kK, nullptr);
    return w;
}

ggml_tensor * columns(ggml_context * ctx, const ggml_tensor * w, int64_t begin, int64_t end) {
    ggml_tensor * part = ggml_new_tensor_2d(ctx, w->type, end - begin, w->ne[1]);
    const size_t offset = ggml_row_size(w->type, begin), bytes = ggml_row_size(w->type, end - begin);
    for (int64_t r = 0; r < w->ne[1]; ++r) {
        std::memcpy(static_cast<char *>(part->data) + r * part->nb[1],
                    static_cast<const char *>(w->data) + r * w->nb[1] + offset, bytes);
    }
    return part;
}

ggml_tensor * tokens(ggml_context * ctx, const std::vector<float> & values, int64_t n) {
    ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kK, n);
    std::memcpy(x->data, values.data(), (size_t) (kK * n) * sizeof(float));
    return x;
}

template <typename T>
std::vector<T> compute(ggml_context * ctx, ggml_tensor * out, int threads) {
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    EXPECT_EQ(ggml_graph_compute_with_ctx(ctx, gf, threads), GGML_STATUS_SUCCESS);
    const T * y = static_cast<const T *>(out->data);
    return std::vector<T>(y, y + ggml_nelements(out));
}

// The F64 sums of W against the first n tokens of xs, on the cells.
std::vector<double> sums(ggml_context * ctx, ggml_tensor * w, const std::vector<int64_t> & bounds,
                         const std::vector<float> & xs, int64_t n, int threads) {
    return compute<double>(ctx, ggml_ext_exact_matmul(ctx, w, tokens(ctx, xs, n), bounds.data(), GGML_TYPE_F64),
                           threads);
}

TEST_P(ExactMatmul, TwoRanksOfCellsAddUpToOneDevice) {
    const TypeCase & tc = GetParam();
    Context c;
    ggml_tensor * w = matrix(c.ctx, random_values(kK * kM, 1), tc.type);
    ggml_tensor * x = tokens(c.ctx, random_values(kK * kT, 2), kT);
    // One device: the sums rounded in the product itself, as exact_round rounds them.
    const std::vector<float> whole =
        compute<float>(c.ctx, ggml_ext_exact_matmul(c.ctx, w, x, tc.bounds.data(), GGML_TYPE_F32), 2);
    const std::vector<float> rounded = compute<float>(
        c.ctx, ggml_ext_exact_round(c.ctx, ggml_ext_exact_matmul(c.ctx, w, x, tc.bounds.data(), GGML_TYPE_F64)), 2);
    EXPECT_EQ(0, std::memcmp(whole.data(), rounded.data(), whole.size() * sizeof(float)));
    // Rank 0 holds cells 0 and 1, rank 1 cells 2 and 3: each gets its columns
    // of x and bounds from 0.
    const std::vector<int64_t> &first = tc.first, &second = tc.second;
    ggml_tensor * x0 = ggml_view_2d(c.ctx, x, 768, kT, x->nb[1], 0);
    ggml_tensor * x1 = ggml_view_2d(c.ctx, x, 768, kT, x->nb[1], 768 * sizeof(float));
    ggml_tensor * parts[2] = {
        ggml_ext_exact_matmul(c.ctx, columns(c.ctx, w, 0, 768), x0, first.data(), GGML_TYPE_F64),
        ggml_ext_exact_matmul(c.ctx, columns(c.ctx, w, 768, kK), x1, second.data(), GGML_TYPE_F64),
    };
    const std::vector<double> p0 = compute<double>(c.ctx, parts[0], 1);
    const std::vector<double> p1 = compute<double>(c.ctx, parts[1], 3);
    size_t differ = 0;
    for (size_t i = 0; i < whole.size(); ++i) differ += (float) (p0[i] + p1[i]) != whole[i];
    EXPECT_EQ(differ, 0u);
}

TEST_P(ExactMatmul, EveryOutputIsTheSameInAnyBatchAndThreadCount) {
    const TypeCase & tc = GetParam();
    Context c;
    ggml_tensor * w = matrix(c.ctx, random_values(kK * kM, 3), tc.type);
    // 40 tokens (q8_0's and q4_0's panels), 19 (token blocks; the panels of
    // the others; q8_0's and q4_0's tokens in lanes), 6 (tiles of four rows)
    // and 3 (tiles of four rows far apart), against each token alone.
    constexpr int64_t kBatch = 40;
    const std::vector<float> xs = random_values(kK * kBatch, 4);
    for (const int64_t n : {kBatch, kT, int64_t(6), int64_t(3)}) {
        const std::vector<double> batch = sums(c.ctx, w, tc.bounds, xs, n, 2);
        for (const int threads : {1, 3}) {
            for (int64_t t = 0; t < n; ++t) {
                SCOPED_TRACE("batch=" + std::to_string(n) + " threads=" + std::to_string(threads) +
                             " token=" + std::to_string(t));
                const std::vector<float> one(xs.begin() + t * kK, xs.begin() + (t + 1) * kK);
                const std::vector<double> alone = sums(c.ctx, w, tc.bounds, one, 1, threads);
                EXPECT_EQ(0, std::memcmp(alone.data(), batch.data() + t * kM, kM * sizeof(double)));
            }
        }
    }
}

// Without bounds the whole row is one cell: what a matrix that needs no
// exact sums is multiplied with, each output the same in any batch.
TEST_P(ExactMatmul, NoBoundsIsOneCellOfTheWholeRow) {
    Context c;
    ggml_tensor * w = matrix(c.ctx, random_values(kK * kM, 9), GetParam().type);
    const std::vector<float> xs = random_values(kK * kT, 10);
    const std::vector<int64_t> one_cell{0, kK};
    const std::vector<float> batch =
        compute<float>(c.ctx, ggml_ext_exact_matmul(c.ctx, w, tokens(c.ctx, xs, kT), nullptr, GGML_TYPE_F32), 2);
    const std::vector<float> bounded = compute<float>(
        c.ctx, ggml_ext_exact_matmul(c.ctx, w, tokens(c.ctx, xs, kT), one_cell.data(), GGML_TYPE_F32), 3);
    EXPECT_EQ(0, std::memcmp(batch.data(), bounded.data(), batch.size() * sizeof(float)));
    for (int64_t t = 0; t < kT; ++t) {
        SCOPED_TRACE("token=" + std::to_string(t));
        const std::vector<float> one(xs.begin() + t * kK, xs.begin() + (t + 1) * kK);
        const std::vector<float> alone =
            compute<float>(c.ctx, ggml_ext_exact_matmul(c.ctx, w, tokens(c.ctx, one, 1), nullptr, GGML_TYPE_F32), 1);
        EXPECT_EQ(0, std::memcmp(alone.data(), batch.data() + t * kM, kM * sizeof(float)));
    }
}

TEST_P(ExactMatmul, EqualsTheProductOfTheDequantizedMatrix) {
    const TypeCase & tc = GetParam();
    Context c;
    ggml_tensor * w = matrix(c.ctx, random_values(kK * kM, 5), tc.type);
    const std::vector<float> xs = random_values(kK * kT, 6);
    const std::vector<double> y = sums(c.ctx, w, tc.bounds, xs, kT, 2);
    std::vector<float> wf(kK * kM);
    ggml_get_type_traits(tc.type)->to_float(w->data, wf.data(), kK * kM);
    // x is rounded to 8 bits per block as well: allow for that, relative to
    // the sum of |terms|.
    const double tolerance = 1e-2;
    for (int64_t t = 0; t < kT; ++t) {
        for (int64_t m = 0; m < kM; ++m) {
            double exact = 0.0, magnitude = 0.0;
            for (int64_t k = 0; k < kK; ++k) {
                exact += (double) wf[m * kK + k] * xs[t * kK + k];
                magnitude += std::fabs((double) wf[m * kK + k] * xs[t * kK + k]);
            }
            ASSERT_NEAR(y[t * kM + m], exact, tolerance * magnitude) << "row " << m << " token " << t;
        }
    }
}

// ggml's own product of the same matrix and tokens, which quantizes x as the
// op does: the same up to the order of addition, for one token (ggml's dot
// products) and batches (its tiled and repacked paths).
TEST_P(ExactMatmul, IsGgmlsProductUpToRounding) {
    ggml_cpu_init();  // ggml's dot products read tables it fills
    Context c;
    ggml_tensor * w = matrix(c.ctx, random_values(kK * kM, 7), GetParam().type);
    const std::vector<float> xs = random_values(kK * 40, 8);
    for (const int64_t n : {int64_t(1), kT, int64_t(40)}) {
        ggml_tensor * x = tokens(c.ctx, xs, n);
        const std::vector<float> ours =
            compute<float>(c.ctx, ggml_ext_exact_matmul(c.ctx, w, x, nullptr, GGML_TYPE_F32), 2);
        const std::vector<float> theirs = compute<float>(c.ctx, ggml_mul_mat(c.ctx, w, x), 2);
        float largest = 0.0f, worst = 0.0f;
        for (size_t i = 0; i < ours.size(); ++i) {
            largest = std::max(largest, std::fabs(theirs[i]));
            worst = std::max(worst, std::fabs(ours[i] - theirs[i]));
        }
        std::printf("%s, %lld tokens: largest difference %g of the largest output %g\n", ggml_type_name(w->type),
                    (long long) n, worst, largest);
        EXPECT_LE(worst, 1e-5f * largest) << n << " tokens";
    }
}

INSTANTIATE_TEST_SUITE_P(Types, ExactMatmul, testing::Values(kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K, kIQ4_XS), type_name);

// Random q8_0 blocks, bytes from lowest to 127 (ggml's quantizer makes
// -127 .. 127; a matrix from elsewhere may hold -128) and any scale.
std::vector<ggml_ext::BlockQ8_0> random_blocks(size_t n, unsigned seed, int lowest = -127) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(lowest, 127);
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    std::vector<ggml_ext::BlockQ8_0> blocks(n);
    for (auto & b : blocks) {
        b.d = ggml_fp32_to_fp16(scale(rng));
        for (int8_t & q : b.qs) q = (int8_t) byte(rng);
    }
    return blocks;
}

// Random q4_K and q5_K blocks (any bytes, so every scale and min from 0 to
// 63, every fifth bit).
template <typename Block>
std::vector<Block> random_q4_k_or_q5_k(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.0f, 0.01f);
    std::vector<Block> blocks(n);
    for (auto & b : blocks) {
        b.d = ggml_fp32_to_fp16(scale(rng));
        b.dmin = ggml_fp32_to_fp16(scale(rng));
        for (uint8_t & s : b.scales) s = (uint8_t) byte(rng);
        for (uint8_t & q : b.qs) q = (uint8_t) byte(rng);
        if constexpr (std::is_same_v<Block, ggml_ext::BlockQ5_K>) {
            for (uint8_t & q : b.qh) q = (uint8_t) byte(rng);
        }
    }
    return blocks;
}

// ggml's q8_K block (bytes -127 .. 127, their sums of 16 as ggml forms them).
struct GgmlQ8K {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
};
static_assert(sizeof(GgmlQ8K) == sizeof(ggml_ext::BlockQ8_K), "one size, two orders");

std::vector<GgmlQ8K> random_ggml_q8_k(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(-127, 127);
    std::uniform_real_distribution<float> scale(0.001f, 0.05f);
    std::vector<GgmlQ8K> blocks(n);
    for (auto & b : blocks) {
        b.d = scale(rng);
        for (int8_t & q : b.qs) q = (int8_t) byte(rng);
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int k = 0; k < 16; ++k) sum += b.qs[16 * g + k];
            b.bsums[g] = (int16_t) sum;
        }
    }
    return blocks;
}

// The same blocks in the kernel's form.
std::vector<ggml_ext::BlockQ8_K> laid_out(const std::vector<GgmlQ8K> & ggml_blocks) {
    std::vector<ggml_ext::BlockQ8_K> x(ggml_blocks.size());
    std::memcpy(x.data(), ggml_blocks.data(), x.size() * sizeof(GgmlQ8K));
    ggml_ext::q4k_lay_out(x.data(), (int64_t) x.size());
    return x;
}

// Random q6_K blocks: any bytes, so every six-bit value and every scale
// from -128 to 127.
std::vector<ggml_ext::BlockQ6_K> random_q6_k(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.0f, 0.001f);
    std::vector<ggml_ext::BlockQ6_K> blocks(n);
    for (auto & b : blocks) {
        b.d = ggml_fp32_to_fp16(scale(rng));
        for (uint8_t & q : b.ql) q = (uint8_t) byte(rng);
        for (uint8_t & q : b.qh) q = (uint8_t) byte(rng);
        for (int8_t & s : b.scales) s = (int8_t) (byte(rng) - 128);
    }
    return blocks;
}

// Random q4_0 blocks: any bytes, so every value from -8 to 7.
std::vector<ggml_ext::BlockQ4_0> random_q4_0(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(-0.01f, 0.01f);
    std::vector<ggml_ext::BlockQ4_0> blocks(n);
    for (auto & b : blocks) {
        b.d = ggml_fp32_to_fp16(scale(rng));
        for (uint8_t & q : b.qs) q = (uint8_t) byte(rng);
    }
    return blocks;
}

// Random IQ4_XS blocks: any bytes, so every level and every scale from
// -32 to 31.
std::vector<ggml_ext::BlockIQ4_XS> random_iq4_xs(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.0f, 0.001f);
    std::vector<ggml_ext::BlockIQ4_XS> blocks(n);
    for (auto & b : blocks) {
        b.d = ggml_fp32_to_fp16(scale(rng));
        b.scales_h = (uint16_t) (byte(rng) << 8 | byte(rng));
        for (uint8_t & s : b.scales_l) s = (uint8_t) byte(rng);
        for (uint8_t & q : b.qs) q = (uint8_t) byte(rng);
    }
    return blocks;
}

std::vector<ggml_ext::GgmlBlockQ8_K> as_ggml_q8_k(const std::vector<GgmlQ8K> & blocks) {
    std::vector<ggml_ext::GgmlBlockQ8_K> x(blocks.size());
    std::memcpy(x.data(), blocks.data(), x.size() * sizeof(GgmlQ8K));
    return x;
}

// Every K-quant path against the scalar one on random blocks: tiles of every
// shape, cells of 2, 1 and 4 blocks, and a 1 x 1 tile giving a tile's output.
template <typename BlockW, typename BlockX, typename Tile>
void check_every_path(const std::vector<BlockW> & w_blocks, const std::vector<BlockX> & x_blocks, Tile tile,
                      const char * type) {
    using ggml_ext::KQuantKernel, ggml_ext::kKQuantTileRows, ggml_ext::kKQuantTileTokens;
    constexpr int64_t n_blocks = 7;
    const std::vector<int64_t> bounds{0, 2, 3, 7};
    ASSERT_EQ(w_blocks.size(), (size_t) (kKQuantTileRows * n_blocks));
    ASSERT_EQ(x_blocks.size(), (size_t) (kKQuantTileTokens * n_blocks));
    const BlockW * w[kKQuantTileRows];
    const BlockX * x[kKQuantTileTokens];
    for (int i = 0; i < kKQuantTileRows; ++i) w[i] = w_blocks.data() + i * n_blocks;
    for (int j = 0; j < kKQuantTileTokens; ++j) x[j] = x_blocks.data() + j * n_blocks;
    constexpr int64_t ld = kKQuantTileRows;
    for (KQuantKernel kernel : ggml_ext::kquant_kernels_available()) {
        for (int nr = 1; nr <= kKQuantTileRows; ++nr) {
            for (int nc = 1; nc <= kKQuantTileTokens; ++nc) {
                SCOPED_TRACE(std::string(type) + " " + ggml_ext::kquant_kernel_name(kernel) + " " + std::to_string(nr) +
                             "x" + std::to_string(nc));
                std::vector<double> got(ld * nc), want(ld * nc);
                tile(kernel, w, nr, x, nc, bounds.data(), n_blocks, got.data(), ld);
                tile(KQuantKernel::Scalar, w, nr, x, nc, bounds.data(), n_blocks, want.data(), ld);
                for (int j = 0; j < nc; ++j) {
                    double alone = 0.0;
                    tile(KQuantKernel::Scalar, w, 1, x + j, 1, bounds.data(), n_blocks, &alone, 1);
                    EXPECT_EQ(0, std::memcmp(&got[j * ld], &want[j * ld], nr * sizeof(double)));
                    EXPECT_EQ(alone, want[j * ld]);
                }
            }
        }
    }
}

TEST(KQuantCells, EveryPathGivesTheScalarPathsBits) {
    const std::vector<ggml_ext::KQuantKernel> kernels = ggml_ext::kquant_kernels_available();
    ASSERT_EQ(kernels.front(), ggml_ext::KQuantKernel::Scalar);
    constexpr size_t rows = ggml_ext::kKQuantTileRows * 7, tokens = ggml_ext::kKQuantTileTokens * 7;
    check_every_path(random_q4_k_or_q5_k<ggml_ext::BlockQ4_K>(rows, 11), laid_out(random_ggml_q8_k(tokens, 12)),
                     ggml_ext::q4k_tile, "q4_K");
    check_every_path(random_q4_k_or_q5_k<ggml_ext::BlockQ5_K>(rows, 15), laid_out(random_ggml_q8_k(tokens, 16)),
                     ggml_ext::q5k_tile, "q5_K");
    check_every_path(random_q6_k(rows, 21), as_ggml_q8_k(random_ggml_q8_k(tokens, 22)), ggml_ext::q6k_tile, "q6_K");
    check_every_path(random_iq4_xs(rows, 25), as_ggml_q8_k(random_ggml_q8_k(tokens, 26)), ggml_ext::iq4xs_tile,
                     "IQ4_XS");
    check_every_path(random_q4_0(rows, 41), random_blocks(tokens, 42), ggml_ext::q40_tile, "q4_0");
    check_every_path(random_blocks(rows, 7, -128), random_blocks(tokens, 8), ggml_ext::q80_tile, "q8_0");
    std::string names;
    for (ggml_ext::KQuantKernel kernel : kernels) names += std::string(" ") + ggml_ext::kquant_kernel_name(kernel);
    std::printf("q4_K, q5_K, q6_K, IQ4_XS, q4_0 and q8_0 paths compared:%s\n", names.c_str());
    for (ggml_type t :
         {GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0}) {
        EXPECT_STREQ(ggml_ext_exact_matmul_kernel(t), ggml_ext::kquant_kernel_name(kernels.back()));
        // Preferred to ggml's products where measured faster: on the AVX-512
        // path, and for q8_0, q4_0 and IQ4_XS only with the panels.
        const bool panelled = t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_0 || t == GGML_TYPE_IQ4_XS;
        EXPECT_EQ(ggml_ext_exact_matmul_preferred(t), kernels.back() == ggml_ext::KQuantKernel::Avx512 &&
                                                          (!panelled || ggml_ext::kquant_panels_available()))
            << ggml_type_name(t);
    }
}

// A type's panels against its scalar tiles: every row count of a panel,
// token groups of up to eight and past them, cells of 2, 1 and 4 blocks.
template <typename Panel, typename BlockW, typename BlockX, typename Tile>
void check_panels(const std::vector<BlockW> & w_blocks, const std::vector<BlockX> & x_blocks, Tile tile) {
    constexpr int64_t n_blocks = 7, n_tokens = 19;
    const std::vector<int64_t> bounds{0, 2, 3, 7};
    ASSERT_EQ(w_blocks.size(), (size_t) (ggml_ext::kPanelRows * n_blocks));
    ASSERT_EQ(x_blocks.size(), (size_t) (n_tokens * n_blocks));
    const BlockW * w[ggml_ext::kPanelRows];
    const BlockX * x[n_tokens];
    for (int i = 0; i < ggml_ext::kPanelRows; ++i) w[i] = w_blocks.data() + i * n_blocks;
    for (int j = 0; j < n_tokens; ++j) x[j] = x_blocks.data() + j * n_blocks;
    Panel panel(n_blocks);
    for (int nr : {1, 5, ggml_ext::kPanelRows}) {
        panel.decode(w, nr);
        for (int nc : {1, 8, 9, (int) n_tokens}) {
            SCOPED_TRACE(std::to_string(nr) + " rows x " + std::to_string(nc) + " tokens");
            std::vector<double> got(ggml_ext::kPanelRows * nc);
            panel.multiply(x, nc, bounds.data(), got.data(), ggml_ext::kPanelRows);
            for (int i = 0; i < nr; ++i) {
                for (int j = 0; j < nc; ++j) {
                    double want = 0.0;
                    tile(ggml_ext::KQuantKernel::Scalar, w + i, 1, x + j, 1, bounds.data(), n_blocks, &want, 1);
                    EXPECT_EQ(got[j * ggml_ext::kPanelRows + i], want) << "row " << i << " token " << j;
                }
            }
        }
    }
}

// q8_0's and q4_0's tokens in lanes against their scalar tiles: every row
// count of a tile, one and two groups of eight tokens and past them, cells
// of 2, 1 and 4 blocks.
template <typename Block, typename Tile>
void check_token_lanes(const std::vector<Block> & w_blocks, const std::vector<ggml_ext::BlockQ8_0> & x_blocks,
                       Tile tile) {
    constexpr int64_t n_blocks = 7;
    const std::vector<int64_t> bounds{0, 2, 3, 7};
    ASSERT_EQ(w_blocks.size(), (size_t) (ggml_ext::kKQuantTileRows * n_blocks));
    ASSERT_EQ(x_blocks.size(), (size_t) (ggml_ext::kLaneTokens * n_blocks));
    const Block * w[ggml_ext::kKQuantTileRows];
    const ggml_ext::BlockQ8_0 * x[ggml_ext::kLaneTokens];
    for (int i = 0; i < ggml_ext::kKQuantTileRows; ++i) w[i] = w_blocks.data() + i * n_blocks;
    for (int j = 0; j < ggml_ext::kLaneTokens; ++j) x[j] = x_blocks.data() + j * n_blocks;
    constexpr int64_t ld = ggml_ext::kKQuantTileRows;
    for (int nc : {1, 2, 8, 9, 17, ggml_ext::kLaneTokens}) {
        const ggml_ext::Block32TokenLanes<Block> lanes(x, nc, n_blocks);
        for (int nr = 1; nr <= ggml_ext::kKQuantTileRows; ++nr) {
            SCOPED_TRACE(std::to_string(nr) + " rows x " + std::to_string(nc) + " tokens");
            std::vector<double> got(ld * nc);
            lanes.multiply(w, nr, bounds.data(), got.data(), ld);
            for (int i = 0; i < nr; ++i) {
                for (int j = 0; j < nc; ++j) {
                    double want = 0.0;
                    tile(ggml_ext::KQuantKernel::Scalar, w + i, 1, x + j, 1, bounds.data(), n_blocks, &want, 1);
                    EXPECT_EQ(got[j * ld + i], want) << "row " << i << " token " << j;
                }
            }
        }
    }
}

TEST(Panels, TokenLanesGiveTheScalarTilesBits) {
    if (!ggml_ext::kquant_panels_available()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
    constexpr size_t rows = ggml_ext::kKQuantTileRows * 7, tokens = ggml_ext::kLaneTokens * 7;
    check_token_lanes(random_blocks(rows, 51, -128), random_blocks(tokens, 52), ggml_ext::q80_tile);
    check_token_lanes(random_q4_0(rows, 53), random_blocks(tokens, 54), ggml_ext::q40_tile);
}

TEST(Panels, GiveTheScalarTilesBits) {
    if (!ggml_ext::kquant_panels_available()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
    constexpr size_t rows = ggml_ext::kPanelRows * 7, tokens = 19 * 7;
    check_panels<ggml_ext::Q4KPanel<ggml_ext::BlockQ4_K>>(random_q4_k_or_q5_k<ggml_ext::BlockQ4_K>(rows, 33),
                                                          laid_out(random_ggml_q8_k(tokens, 34)), ggml_ext::q4k_tile);
    check_panels<ggml_ext::Q4KPanel<ggml_ext::BlockQ5_K>>(random_q4_k_or_q5_k<ggml_ext::BlockQ5_K>(rows, 35),
                                                          laid_out(random_ggml_q8_k(tokens, 36)), ggml_ext::q5k_tile);
    check_panels<ggml_ext::IQ4Panel>(random_iq4_xs(rows, 31), as_ggml_q8_k(random_ggml_q8_k(tokens, 32)),
                                     ggml_ext::iq4xs_tile);
    check_panels<ggml_ext::Block32Panel<ggml_ext::BlockQ4_0>>(random_q4_0(rows, 43), random_blocks(tokens, 44),
                                                              ggml_ext::q40_tile);
    check_panels<ggml_ext::Block32Panel<ggml_ext::BlockQ8_0>>(random_blocks(rows, 47, -128), random_blocks(tokens, 48),
                                                              ggml_ext::q80_tile);
}

// A scalar path against ggml's own dot product of one row and token with
// q8_K (x given to the path as it reads it): the same value up to float
// rounding.
template <typename BlockW, typename XGgml, typename BlockX, typename Tile>
void check_against_ggml(ggml_type type, const std::vector<BlockW> & w_blocks, const std::vector<XGgml> & x_ggml,
                        const std::vector<BlockX> & x_blocks, Tile tile) {
    SCOPED_TRACE(ggml_type_name(type));
    const ggml_type_traits_cpu * traits = ggml_get_type_traits_cpu(type);
    const bool blocks32 = type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q8_0;
    ASSERT_EQ(traits->vec_dot_type, blocks32 ? GGML_TYPE_Q8_0 : GGML_TYPE_Q8_K);
    const int64_t n = (int64_t) w_blocks.size(), bounds[2] = {0, n};
    float theirs = 0.0f;
    traits->vec_dot((int) (n * ggml_blck_size(type)), &theirs, 0, w_blocks.data(), 0, x_ggml.data(), 0, 1);
    const BlockW * w = w_blocks.data();
    const BlockX * x = x_blocks.data();
    double ours = 0.0;
    tile(ggml_ext::KQuantKernel::Scalar, &w, 1, &x, 1, bounds, n, &ours, 1);
    EXPECT_NEAR(ours, theirs, 1e-5 * std::fabs(theirs) + 1e-6);
}

TEST(KQuantCells, EachScalarPathIsGgmlsDotProduct) {
    ggml_cpu_init();  // ggml's dot products read tables it fills
    const std::vector<GgmlQ8K> x = random_ggml_q8_k(5, 14);
    check_against_ggml(GGML_TYPE_Q4_K, random_q4_k_or_q5_k<ggml_ext::BlockQ4_K>(5, 13), x, laid_out(x),
                       ggml_ext::q4k_tile);
    check_against_ggml(GGML_TYPE_Q5_K, random_q4_k_or_q5_k<ggml_ext::BlockQ5_K>(5, 17), x, laid_out(x),
                       ggml_ext::q5k_tile);
    check_against_ggml(GGML_TYPE_Q6_K, random_q6_k(5, 23), x, as_ggml_q8_k(x), ggml_ext::q6k_tile);
    check_against_ggml(GGML_TYPE_IQ4_XS, random_iq4_xs(5, 27), x, as_ggml_q8_k(x), ggml_ext::iq4xs_tile);
    const std::vector<ggml_ext::BlockQ8_0> x8 = random_blocks(5, 46);
    check_against_ggml(GGML_TYPE_Q4_0, random_q4_0(5, 45), x8, x8, ggml_ext::q40_tile);
    check_against_ggml(GGML_TYPE_Q8_0, random_blocks(5, 49), x8, x8, ggml_ext::q80_tile);
}

}  // namespace
