#include "ggml-ext/ops/exact_matmul.h"

#include "ggml-ext/ops/iq4_xs_cells.h"
#include "ggml-ext/ops/op_params.h"
#include "ggml-ext/ops/q4_k_cells.h"
#include "ggml-ext/ops/q6_k_cells.h"
#include "ggml-ext/ops/q8_0_cells.h"

#include <algorithm>
#include <vector>

#include "ggml-cpu.h"

namespace {

using ggml_ext::BlockQ4_K, ggml_ext::BlockQ5_K, ggml_ext::BlockQ8_0, ggml_ext::BlockQ8_K;

// This thread's rows [begin, end): whole tiles of `tile` rows, in turn.
struct RowShare {
    int64_t begin, end;
    RowShare(int64_t rows, int64_t tile, int ith, int nth) {
        const int64_t tiles = (rows + tile - 1) / tile;
        begin = std::min(rows, tiles * ith / nth * tile);
        end = std::min(rows, tiles * (ith + 1) / nth * tile);
    }
};

// The product's cells, their offsets in blocks of W's type
// (ggml-ext/ops/op_params.h): blocks[0] = 0 < ... < blocks[n] = W's blocks.
// The reduction grid has at most 10 cells (runtime/shard/shard_plan.h).
struct Cells {
    int32_t n;
    int32_t blocks[GGML_MAX_OP_PARAMS / sizeof(int32_t) - 1];
};
constexpr int kMaxCells = (int) (sizeof(Cells::blocks) / sizeof(int32_t)) - 1;
static_assert(kMaxCells == GGML_EXT_EXACT_MATMUL_MAX_CELLS, "exact_matmul.h states the capacity");
constexpr const char * kCellsName = "exact_matmul_cells";

// bounds in columns (nullptr: one cell of width) as Cells.
Cells cells_of(const int64_t * bounds, int64_t width, int64_t block) {
    Cells c{};
    c.blocks[0] = 0;
    if (!bounds) {
        c.n = 1;
        c.blocks[1] = (int32_t) (width / block);
        return c;
    }
    while (bounds[c.n] < width) {
        GGML_ASSERT(c.n < kMaxCells && "more cells than an exact product takes");
        ++c.n;
        c.blocks[c.n] = (int32_t) (bounds[c.n] / block);
    }
    return c;
}

std::vector<int64_t> cell_blocks(const ggml_tensor * dst) {
    Cells c{};
    ggml_ext::op_params_of(dst, kCellsName, &c);
    return std::vector<int64_t>(c.blocks, c.blocks + c.n + 1);
}

constexpr int64_t kKQuantValues = 256;  // a K-quant super-block's values

// x's rows in the type W's dot products take; for q4_K and q5_K W, in the order of
// its kernel (ggml_ext::BlockQ8_K).
void quantize_rows_of(ggml_tensor * dst, int ith, int nth, bool q4k_order) {
    const ggml_tensor * x = dst->src[0];
    const ggml_from_float_t from_float = ggml_get_type_traits_cpu(dst->type)->from_float;
    const int64_t T = x->ne[1];
    for (int64_t t = T * ith / nth; t < T * (ith + 1) / nth; ++t) {
        char * row = static_cast<char *>(dst->data) + t * dst->nb[1];
        from_float(reinterpret_cast<const float *>(static_cast<const char *>(x->data) + t * x->nb[1]), row, x->ne[0]);
        if (q4k_order) ggml_ext::q4k_lay_out(row, x->ne[0] / kKQuantValues);
    }
}

void quantize_rows(ggml_tensor * dst, int ith, int nth, void *) {
    quantize_rows_of(dst, ith, nth, false);
}

void quantize_rows_q4k_order(ggml_tensor * dst, int ith, int nth, void *) {
    quantize_rows_of(dst, ith, nth, true);
}

// Tokens a thread runs against its rows before moving to the next rows: their
// quantized rows stay in the cache while the rows stream past.
constexpr int64_t kTokenBlock = 64;

// Up to this many tokens the product is bound by reading W, and a tile's
// four rows come from four sections of the thread's rows, so that W is read
// as four streams far apart. Adjacent rows read side by side are the slow
// pattern for the hardware prefetchers of AMD EPYC hosts (a plain sum of
// 1632-byte rows, 2 threads: 64 GB/s as one stream, 34 as two adjacent rows
// in turn, 72 as two halves), and four rows are two chains of additions
// where one row waits on each block's (one token, 2 threads: 1.1-2.3x
// ggml's product against 0.95-1.06x with one row a tile). Past it, four
// adjacent rows share each token's bytes and the product is bound by
// arithmetic.
constexpr int64_t kStreamTokens = 4;

// The rows of W or x at r, as blocks of their types.
template <typename Block>
const Block * row_of(const ggml_tensor * t, int64_t r) {
    return reinterpret_cast<const Block *>(static_cast<const char *>(t->data) + r * t->nb[1]);
}

// One thread's share of a product in tiles of up to kRows rows and kTokens
// tokens; tile(wr, nr, xr, nc, sums) runs the kernel, sums[k * kRows + i]
// the output of row i and token k. Batches of up to stream_tokens read the
// thread's rows as four streams far apart (kStreamTokens), larger ones in
// blocks of tokens.
template <typename BlockW, typename BlockX, int kRows, int kTokens>
class TiledProduct {
  public:
    TiledProduct(ggml_tensor * dst, int ith, int nth)
        : dst_(dst), w_(dst->src[0]), x_(dst->src[1]), share_(w_->ne[1], kRows, ith, nth) {}

    template <typename Tile>
    void run(int64_t tile_tokens, const Tile & tile, int64_t stream_tokens = kStreamTokens) const {
        const int64_t T = x_->ne[1];
        double sums[kTokens * kRows];
        const BlockW * wr[kRows];
        int64_t rows[kRows];
        if (T <= stream_tokens) {
            GGML_ASSERT(T <= kTokens);
            const int64_t section = (share_.end - share_.begin + kRows - 1) / kRows;
            const BlockX * xr[kTokens];
            for (int64_t k = 0; k < T; ++k) xr[k] = row_of<BlockX>(x_, k);
            for (int64_t k = 0; k < section; ++k) {
                const int nr = rows_at(share_.begin + k, section, wr, rows);
                tile(wr, nr, xr, (int) T, sums);
                store(sums, rows, nr, 0, (int) T);
            }
            return;
        }
        for (int64_t j0 = 0; j0 < T; j0 += kTokenBlock) {
            const int64_t j_end = std::min(T, j0 + kTokenBlock);
            for (int64_t i0 = share_.begin; i0 < share_.end; i0 += kRows) {
                const int nr = rows_at(i0, 1, wr, rows);
                for (int64_t j = j0; j < j_end; j += tile_tokens) {
                    const BlockX * xr[kTokens];
                    const int nc = (int) std::min<int64_t>(tile_tokens, j_end - j);
                    for (int k = 0; k < nc; ++k) xr[k] = row_of<BlockX>(x_, j + k);
                    tile(wr, nr, xr, nc, sums);
                    store(sums, rows, nr, j, nc);
                }
            }
        }
    }

    // The tile of rows first, first + stride, ... (up to kRows, in this thread's share).
    int rows_at(int64_t first, int64_t stride, const BlockW ** wr, int64_t * rows) const {
        int nr = 0;
        for (int64_t r = first; r < share_.end && nr < kRows; r += stride) {
            rows[nr] = r;
            wr[nr++] = row_of<BlockW>(w_, r);
        }
        return nr;
    }

    // A tile's sums into its output rows of tokens j..
    void store(const double * sums, const int64_t * rows, int nr, int64_t j, int nc) const {
        const bool rounded = dst_->type == GGML_TYPE_F32;
        for (int k = 0; k < nc; ++k) {
            char * out = static_cast<char *>(dst_->data) + (j + k) * dst_->nb[1];
            for (int i = 0; i < nr; ++i) {
                const double sum = sums[k * kRows + i];
                if (rounded) {
                    reinterpret_cast<float *>(out)[rows[i]] = (float) sum;
                } else {
                    reinterpret_cast<double *>(out)[rows[i]] = sum;
                }
            }
        }
    }

    const RowShare & share() const { return share_; }

  private:
    ggml_tensor * dst_;
    const ggml_tensor * w_;
    const ggml_tensor * x_;
    const RowShare share_;
};

// A product on the K-quant paths (k_quant_kernel.h): BlockX the x blocks its
// tile reads, tile its kernel.
template <typename BlockW, typename BlockX, auto tile>
void product_k_quant(ggml_tensor * dst, int ith, int nth) {
    using ggml_ext::kKQuantTileRows;
    const int64_t n_blocks = dst->src[0]->ne[0] / ggml_blck_size(dst->src[0]->type);
    const std::vector<int64_t> cells = cell_blocks(dst);
    const ggml_ext::KQuantKernel kernel = ggml_ext::kquant_best_kernel();
    const TiledProduct<BlockW, BlockX, kKQuantTileRows, ggml_ext::kKQuantTileTokens> product(dst, ith, nth);
    product.run(ggml_ext::kquant_tile_tokens(kernel),
                [&](const BlockW * const * wr, int nr, const BlockX * const * xr, int nc, double * sums) {
                    tile(kernel, wr, nr, xr, nc, cells.data(), n_blocks, sums, kKQuantTileRows);
                });
}

// From this many tokens a q4_K, q5_K or IQ4_XS product decodes panels of
// rows once and runs the tokens against them (the tiles' outputs; below it
// the tiles are faster, 1536 x 6144 IQ4_XS: 1.0 against 1.3 ms at 8
// tokens); q8_0's and q4_0's past the tokens they lay out in lanes.
constexpr int64_t kPanelTokens = 16;

// A product of a type with panels (Panel) from min_tokens where the CPU
// runs them, else its tiles.
template <typename BlockW, typename BlockX, typename Panel, auto tile>
void product_in_panels(ggml_tensor * dst, int ith, int nth, int64_t min_tokens = kPanelTokens) {
    const int64_t T = dst->src[1]->ne[1];
    if (T < min_tokens || !ggml_ext::kquant_panels_available()) {
        product_k_quant<BlockW, BlockX, tile>(dst, ith, nth);
        return;
    }
    const int64_t n_blocks = dst->src[0]->ne[0] / ggml_blck_size(dst->src[0]->type);
    const std::vector<int64_t> cells = cell_blocks(dst);
    using ggml_ext::kPanelRows;
    const TiledProduct<BlockW, BlockX, kPanelRows, kTokenBlock> product(dst, ith, nth);
    Panel panel(n_blocks);
    std::vector<const BlockX *> xr((size_t) T);
    for (int64_t k = 0; k < T; ++k) xr[k] = row_of<BlockX>(dst->src[1], k);
    std::vector<double> sums((size_t) (kTokenBlock * kPanelRows));
    for (int64_t i0 = product.share().begin; i0 < product.share().end; i0 += kPanelRows) {
        const BlockW * wr[kPanelRows];
        int64_t rows[kPanelRows];
        const int nr = product.rows_at(i0, 1, wr, rows);
        panel.decode(wr, nr);
        for (int64_t j = 0; j < T; j += kTokenBlock) {
            const int nc = (int) std::min(kTokenBlock, T - j);
            panel.multiply(xr.data() + j, nc, cells.data(), sums.data(), kPanelRows);
            product.store(sums.data(), rows, nr, j, nc);
        }
    }
}

// The most tokens q8_0 and q4_0 lay out in lanes for rows of n_blocks: up
// to kLaneTokens, in groups of eight, while the layout (40 bytes a token
// and block) stays within 256 KiB, read again for every four rows from the
// cache.
int64_t lane_tokens(int64_t n_blocks) {
    const int64_t fit = (256 << 10) / (40 * n_blocks) / 8 * 8;
    return std::clamp<int64_t>(fit, 8, ggml_ext::kLaneTokens);
}

// q8_0 and q4_0: from three tokens to lane_tokens, the tokens laid out in
// lanes once by each thread and its rows against them (a tile sums each
// block of 32 across lanes: 1536 x 6144 q8_0 at 4 tokens, 0.58 against
// 0.79 ms; panels: at 32 tokens, 1.8 against 2.7 ms); from more, panels.
// One or two tokens take the tiles (two fill a quarter of the lanes: 6144
// x 1536 q8_0, 0.46 against 0.53 ms).
constexpr int64_t kLaneMinTokens = 3;
template <typename BlockW, auto tile>
void product_blocks32(ggml_tensor * dst, int ith, int nth) {
    using ggml_ext::kKQuantTileRows, ggml_ext::kLaneTokens;
    const int64_t T = dst->src[1]->ne[1], n_blocks = dst->src[0]->ne[0] / 32;
    if (T < kLaneMinTokens || T > lane_tokens(n_blocks) || !ggml_ext::kquant_panels_available()) {
        product_in_panels<BlockW, BlockQ8_0, ggml_ext::Block32Panel<BlockW>, tile>(dst, ith, nth, kLaneMinTokens);
        return;
    }
    const BlockQ8_0 * xr[kLaneTokens];
    for (int64_t k = 0; k < T; ++k) xr[k] = row_of<BlockQ8_0>(dst->src[1], k);
    const std::vector<int64_t> cells = cell_blocks(dst);
    const ggml_ext::Block32TokenLanes<BlockW> lanes(xr, (int) T, n_blocks);
    const TiledProduct<BlockW, BlockQ8_0, kKQuantTileRows, kLaneTokens> product(dst, ith, nth);
    // Their rows as four streams far apart, as one token reads them (8
    // tokens, 1536 x 6144: 0.57 against 1.18 ms in adjacent rows).
    product.run(
        kLaneTokens,
        [&](const BlockW * const * wr, int nr, const BlockQ8_0 * const *, int, double * sums) {
            lanes.multiply(wr, nr, cells.data(), sums, kKQuantTileRows);
        },
        kLaneTokens);
}

void product(ggml_tensor * dst, int ith, int nth, void *) {
    switch (dst->src[0]->type) {
        case GGML_TYPE_Q4_K:
            product_in_panels<BlockQ4_K, BlockQ8_K, ggml_ext::Q4KPanel<BlockQ4_K>, ggml_ext::q4k_tile>(dst, ith, nth);
            break;
        case GGML_TYPE_Q5_K:
            product_in_panels<BlockQ5_K, BlockQ8_K, ggml_ext::Q4KPanel<BlockQ5_K>, ggml_ext::q5k_tile>(dst, ith, nth);
            break;
        case GGML_TYPE_Q6_K:
            product_k_quant<ggml_ext::BlockQ6_K, ggml_ext::GgmlBlockQ8_K, ggml_ext::q6k_tile>(dst, ith, nth);
            break;
        case GGML_TYPE_Q4_0:
            product_blocks32<ggml_ext::BlockQ4_0, ggml_ext::q40_tile>(dst, ith, nth);
            break;
        case GGML_TYPE_Q8_0:
            product_blocks32<BlockQ8_0, ggml_ext::q80_tile>(dst, ith, nth);
            break;
        case GGML_TYPE_IQ4_XS:
            product_in_panels<ggml_ext::BlockIQ4_XS, ggml_ext::GgmlBlockQ8_K, ggml_ext::IQ4Panel, ggml_ext::iq4xs_tile>(
                dst, ith, nth);
            break;
        default:
            GGML_ABORT("exact_matmul: no kernel for %s", ggml_type_name(dst->src[0]->type));
    }
}

void check_bounds(const ggml_tensor * w, const int64_t * bounds) {
    if (!bounds) return;
    const int64_t K = w->ne[0];
    GGML_ASSERT(bounds[0] == 0);
    for (int64_t c = 0; bounds[c] < K; ++c) {
        GGML_ASSERT(bounds[c + 1] > bounds[c] && bounds[c + 1] <= K);
        GGML_ASSERT(bounds[c + 1] % ggml_blck_size(w->type) == 0);
    }
}

}  // namespace

extern "C" {

bool ggml_ext_exact_matmul_takes(enum ggml_type type) {
    return type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K ||
           type == GGML_TYPE_Q6_K || type == GGML_TYPE_IQ4_XS;
}

const char * ggml_ext_exact_matmul_kernel(enum ggml_type type) {
    GGML_ASSERT(ggml_ext_exact_matmul_takes(type));
    return ggml_ext::kquant_kernel_name(ggml_ext::kquant_best_kernel());
}

bool ggml_ext_exact_matmul_preferred(enum ggml_type type) {
    // ggml multiplies q8_0 batches in tiles of its sgemm, q4_0 ones in
    // repacked tiles and IQ4_XS ones as panels of bytes; these kernels beat
    // them with their panels (AVX-512 VNNI).
    const bool panelled = type == GGML_TYPE_IQ4_XS || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q8_0;
    if (panelled && !ggml_ext::kquant_panels_available()) return false;
    return ggml_ext_exact_matmul_takes(type) && ggml_ext::kquant_kernel_beats_ggml(ggml_ext::kquant_best_kernel());
}

ggml_tensor * ggml_ext_exact_matmul(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, const int64_t * bounds,
                                    enum ggml_type out_type) {
    GGML_ASSERT(out_type == GGML_TYPE_F64 || out_type == GGML_TYPE_F32);
    GGML_ASSERT(ggml_ext_exact_matmul_takes(w->type));
    GGML_ASSERT(ggml_is_contiguous(w) && w->ne[2] == 1 && w->ne[3] == 1);
    GGML_ASSERT(x->type == GGML_TYPE_F32 && x->nb[0] == sizeof(float) && x->ne[0] == w->ne[0]);
    GGML_ASSERT(x->ne[2] == 1 && x->ne[3] == 1);
    check_bounds(w, bounds);
    // x quantized as ggml's own product of W quantizes it.
    const ggml_type x_type = ggml_get_type_traits_cpu(w->type)->vec_dot_type;
    ggml_tensor * x_args[1] = {x};
    ggml_tensor * xq =
        ggml_custom_4d(ctx, x_type, x->ne[0], x->ne[1], 1, 1, x_args, 1,
                       w->type == GGML_TYPE_Q4_K || w->type == GGML_TYPE_Q5_K ? quantize_rows_q4k_order : quantize_rows,
                       GGML_N_TASKS_MAX, nullptr);
    const Cells cells = cells_of(bounds, w->ne[0], ggml_blck_size(w->type));
    ggml_tensor * args[3] = {w, xq, ggml_ext::op_params_tensor(ctx, kCellsName, cells)};
    ggml_tensor * out =
        ggml_custom_4d(ctx, out_type, w->ne[1], x->ne[1], 1, 1, args, 3, product, GGML_N_TASKS_MAX, nullptr);
    ggml_set_name(out, "exact_matmul");
    return out;
}
}
