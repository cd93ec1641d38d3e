// SplitTensor and plan_shards against a plain reference buffer: every write
// goes to both, every read must agree, and each shard must hold exactly the
// slice of the reference that its range names.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "ggml-cpu.h"
#include "ggml-ext/error.h"
#include "ggml-ext/shard_range.h"
#include "ggml-ext/split_tensor.h"
#include "ggml.h"

namespace {

using llama_tp::Error;
using llama_tp::plan_shards;
using llama_tp::ShardRange;
using llama_tp::SplitAxis;
using llama_tp::SplitTensor;
using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------- plan_shards

std::vector<std::pair<int64_t, int64_t>> as_pairs(const std::vector<ShardRange> & ranges) {
    std::vector<std::pair<int64_t, int64_t>> pairs;
    for (const ShardRange & range : ranges) {
        pairs.emplace_back(range.begin, range.end);
    }
    return pairs;
}

std::string thrown_message(const std::function<void()> & action) {
    try {
        action();
    } catch (const Error & error) {
        return error.what();
    }
    return "(nothing thrown)";
}

TEST(PlanShards, EvenSplit) {
    using P = std::vector<std::pair<int64_t, int64_t>>;
    EXPECT_EQ(as_pairs(plan_shards(128, 32, {1, 1, 1, 1})), (P{{0, 32}, {32, 64}, {64, 96}, {96, 128}}));
    EXPECT_EQ(as_pairs(plan_shards(4096, 256, {1, 1})), (P{{0, 2048}, {2048, 4096}}));
    EXPECT_EQ(as_pairs(plan_shards(7, 1, {1})), (P{{0, 7}}));
}

TEST(PlanShards, EvenSplitOfIndivisibleUnitsRoundsToNearest) {
    using P = std::vector<std::pair<int64_t, int64_t>>;
    // 3 units over 2 ranks: the boundary 1.5 rounds to 2.
    EXPECT_EQ(as_pairs(plan_shards(96, 32, {1, 1})), (P{{0, 64}, {64, 96}}));
    // 10 units over 3 ranks: boundaries 3.33 and 6.67 round to 3 and 7.
    EXPECT_EQ(as_pairs(plan_shards(10, 1, {1, 1, 1})), (P{{0, 3}, {3, 7}, {7, 10}}));
}

TEST(PlanShards, UnevenSplit) {
    using P = std::vector<std::pair<int64_t, int64_t>>;
    EXPECT_EQ(as_pairs(plan_shards(4096, 256, {3, 1})), (P{{0, 3072}, {3072, 4096}}));
    EXPECT_EQ(as_pairs(plan_shards(1024, 32, {1, 2, 1})), (P{{0, 256}, {256, 768}, {768, 1024}}));
    // 7 heads of 64 at 3:1: the boundary 5.25 heads rounds to 5.
    EXPECT_EQ(as_pairs(plan_shards(448, 64, {3, 1})), (P{{0, 320}, {320, 448}}));
}

TEST(PlanShards, TinyWeightStillGetsOneUnit) {
    using P = std::vector<std::pair<int64_t, int64_t>>;
    EXPECT_EQ(as_pairs(plan_shards(128, 32, {100, 1})), (P{{0, 96}, {96, 128}}));
    EXPECT_EQ(as_pairs(plan_shards(96, 32, {1, 100, 1})), (P{{0, 32}, {32, 64}, {64, 96}}));
}

TEST(PlanShards, ImpossibleSplitsSayWhatWouldWork) {
    const std::string too_many = thrown_message([] { plan_shards(1024, 256, std::vector<float>(8, 1.0f)); });
    EXPECT_NE(too_many.find("4 units of 256 across 8 ranks"), std::string::npos) << too_many;
    EXPECT_NE(too_many.find("at most 4 ranks"), std::string::npos) << too_many;

    const std::string not_multiple = thrown_message([] { plan_shards(100, 32, {1, 1}); });
    EXPECT_NE(not_multiple.find("multiple of the granularity"), std::string::npos) << not_multiple;

    const std::string negative = thrown_message([] { plan_shards(128, 32, {1, -1}); });
    EXPECT_NE(negative.find("rank 1"), std::string::npos) << negative;
    EXPECT_NE(negative.find("positive"), std::string::npos) << negative;

    EXPECT_NE(thrown_message([] { plan_shards(128, 32, {1, 0}); }).find("positive"), std::string::npos);
    EXPECT_NE(thrown_message([] { plan_shards(128, 32, {NAN, 1}); }).find("positive"), std::string::npos);
    EXPECT_NE(thrown_message([] { plan_shards(128, 32, {}); }).find("0 ranks"), std::string::npos);
    EXPECT_NE(thrown_message([] { plan_shards(128, 0, {1}); }).find("granularity"), std::string::npos);
    EXPECT_NE(thrown_message([] { plan_shards(0, 32, {1}); }).find("positive"), std::string::npos);
}

TEST(PlanShards, RandomPlansTileAlignAndFollowWeights) {
    std::mt19937_64 rng(1234);
    for (int trial = 0; trial < 5000; ++trial) {
        const int64_t granularity = std::vector<int64_t>{1, 32, 64, 128, 256}[rng() % 5];
        const size_t n_ranks = 1 + rng() % 8;
        const int64_t units = static_cast<int64_t>(n_ranks + rng() % 200);
        std::vector<float> weights(n_ranks);
        for (float & weight : weights) {
            weight = 0.25f + static_cast<float>(rng() % 16) / 4.0f;
        }
        const std::vector<ShardRange> ranges = plan_shards(units * granularity, granularity, weights);
        ASSERT_EQ(ranges.size(), n_ranks);
        EXPECT_EQ(as_pairs(ranges), as_pairs(plan_shards(units * granularity, granularity, weights)));

        double total = 0.0;
        for (float weight : weights) {
            total += weight;
        }
        double cumulative = 0.0;
        int64_t expected = 0;
        for (size_t rank = 0; rank < n_ranks; ++rank) {
            ASSERT_EQ(ranges[rank].begin, expected);
            ASSERT_GT(ranges[rank].size(), 0);
            ASSERT_EQ(ranges[rank].end % granularity, 0);
            cumulative += weights[rank];
            // A boundary strays from its ideal position by rounding (half a
            // unit) plus at most one unit per neighbour pushed off zero.
            const double ideal = static_cast<double>(units) * cumulative / total;
            EXPECT_LE(std::abs(static_cast<double>(ranges[rank].end / granularity) - ideal), 0.5 + n_ranks)
                << "trial " << trial;
            expected = ranges[rank].end;
        }
        EXPECT_EQ(expected, units * granularity);
    }
}

TEST(PlanShards, ProportionalWhenEveryShareIsLarge) {
    std::mt19937_64 rng(99);
    for (int trial = 0; trial < 2000; ++trial) {
        const size_t n_ranks = 2 + rng() % 4;
        const int64_t units = 1000 + static_cast<int64_t>(rng() % 1000);
        std::vector<float> weights(n_ranks);
        for (float & weight : weights) {
            weight = static_cast<float>(1 + rng() % 8);
        }
        const std::vector<ShardRange> ranges = plan_shards(units * 32, 32, weights);
        double total = 0.0;
        for (float weight : weights) {
            total += weight;
        }
        double cumulative = 0.0;
        for (size_t rank = 0; rank + 1 < n_ranks; ++rank) {
            cumulative += weights[rank];
            const double ideal = static_cast<double>(units) * cumulative / total;
            EXPECT_LE(std::abs(static_cast<double>(ranges[rank].end / 32) - ideal), 0.5);
        }
    }
}

// ---------------------------------------------------------------- SplitTensor

std::vector<ggml_backend_buffer_type_t> cpu_bufts(size_t n_ranks) {
    return std::vector<ggml_backend_buffer_type_t>(n_ranks, ggml_backend_cpu_buffer_type());
}

Bytes random_bytes(std::mt19937_64 & rng, size_t size) {
    Bytes bytes(size);
    for (uint8_t & byte : bytes) {
        byte = static_cast<uint8_t>(rng());
    }
    return bytes;
}

size_t logical_row_bytes(const SplitTensor & tensor) {
    return ggml_row_size(tensor.type(), tensor.ne()[0]);
}

// What rank's shard must hold, derived row by row from the reference.
Bytes expected_shard(const SplitTensor & tensor, const Bytes & reference, int rank) {
    const SplitTensor::Shape & ne = tensor.ne();
    const ShardRange & owned = tensor.range(rank);
    const size_t row = logical_row_bytes(tensor);
    Bytes shard;
    for (int64_t i3 = 0; i3 < ne[3]; ++i3) {
        for (int64_t i2 = 0; i2 < ne[2]; ++i2) {
            for (int64_t i1 = 0; i1 < ne[1]; ++i1) {
                const size_t row_start = static_cast<size_t>((i3 * ne[2] + i2) * ne[1] + i1) * row;
                const uint8_t * row_data = reference.data() + row_start;
                if (tensor.axis() == SplitAxis::Columns) {
                    const size_t begin = ggml_row_size(tensor.type(), owned.begin);
                    const size_t end = ggml_row_size(tensor.type(), owned.end);
                    shard.insert(shard.end(), row_data + begin, row_data + end);
                } else if (tensor.axis() == SplitAxis::Mirrored || (i1 >= owned.begin && i1 < owned.end)) {
                    shard.insert(shard.end(), row_data, row_data + row);
                }
            }
        }
    }
    return shard;
}

Bytes shard_contents(const SplitTensor & tensor, int rank) {
    Bytes bytes(ggml_nbytes(tensor.shard(rank)));
    ggml_backend_tensor_get(tensor.shard(rank), bytes.data(), 0, bytes.size());
    return bytes;
}

void expect_matches_reference(const SplitTensor & tensor, const Bytes & reference) {
    Bytes whole(tensor.nbytes());
    tensor.get(whole.data(), 0, whole.size());
    ASSERT_TRUE(whole == reference) << "whole-tensor get differs from the reference";
    for (int rank = 0; rank < tensor.n_ranks(); ++rank) {
        ASSERT_TRUE(shard_contents(tensor, rank) == expected_shard(tensor, reference, rank))
            << "rank " << rank << "'s shard differs from its slice of the reference";
    }
}

struct SplitCase {
    ggml_type type;
    SplitAxis axis;
    std::vector<float> weights;
};

std::string describe(const SplitCase & c) {
    std::string name = std::string(ggml_type_name(c.type)) + "_" + split_axis_name(c.axis);
    for (float weight : c.weights) {
        name += "_" + std::to_string(static_cast<int>(weight));
    }
    return name;
}

std::string case_name(const testing::TestParamInfo<SplitCase> & info) {
    return describe(info.param);
}

void PrintTo(const SplitCase & c, std::ostream * os) {
    *os << describe(c);
}

std::vector<SplitCase> all_cases() {
    const std::vector<std::vector<float>> weight_sets = {
        {1, 1}, {1, 1, 1}, {1, 1, 1, 1}, {3, 1}, {1, 2, 1},
    };
    std::vector<SplitCase> cases;
    for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0}) {
        for (SplitAxis axis : {SplitAxis::Columns, SplitAxis::Rows}) {
            for (const std::vector<float> & weights : weight_sets) {
                cases.push_back({type, axis, weights});
            }
        }
    }
    return cases;
}

class SplitTensorRandom : public testing::TestWithParam<SplitCase> {
  protected:
    // Odd sizes so that boundaries fall mid-row and mid-slab; Q8_0 rows are 7 blocks.
    SplitTensor::Shape shape() const {
        const int64_t ne0 = GetParam().type == GGML_TYPE_Q8_0 ? 7 * 32 : 50;
        return {ne0, 7, 3, 2};
    }

    SplitTensor make(const SplitTensor::Shape & ne) const {
        const SplitCase & c = GetParam();
        const int64_t granularity = c.axis == SplitAxis::Columns ? ggml_blck_size(c.type) : 1;
        const int dim = c.axis == SplitAxis::Columns ? 0 : 1;
        return SplitTensor::split("w", c.type, ne, c.axis, plan_shards(ne[dim], granularity, c.weights),
                                  cpu_bufts(c.weights.size()));
    }

    // Offsets and sizes in units of this many bytes: any byte, or whole blocks.
    size_t granule() const { return ggml_is_quantized(GetParam().type) ? ggml_type_size(GetParam().type) : 1; }

    // A random byte range: mostly short ones (within a row or two), some long.
    std::pair<size_t, size_t> random_range(std::mt19937_64 & rng, size_t total, size_t row) const {
        const size_t granules = total / granule();
        const size_t begin = rng() % (granules + 1);
        size_t limit = granules - begin;
        if (rng() % 4 != 0) {
            limit = std::min(limit, 2 * row / granule());
        }
        const size_t length = rng() % (limit + 1);
        return {begin * granule(), length * granule()};
    }
};

TEST_P(SplitTensorRandom, RandomSetGetMatchReference) {
    const SplitTensor::Shape ne = shape();
    SplitTensor tensor = make(ne);
    const size_t total = tensor.nbytes();
    const size_t row = logical_row_bytes(tensor);
    ASSERT_EQ(total, row * 7 * 3 * 2);

    std::mt19937_64 rng(42 + GetParam().weights.size());
    Bytes reference = random_bytes(rng, total);
    tensor.set(reference.data(), 0, total);
    expect_matches_reference(tensor, reference);

    for (int op = 0; op < 3000; ++op) {
        const auto [offset, size] = random_range(rng, total, row);
        if (rng() % 2 == 0) {
            const Bytes data = random_bytes(rng, size);
            tensor.set(data.data(), offset, size);
            std::copy(data.begin(), data.end(), reference.begin() + offset);
        } else {
            Bytes data(size + 2, 0xA5);
            tensor.get(data.data() + 1, offset, size);
            ASSERT_TRUE(std::equal(reference.begin() + offset, reference.begin() + offset + size, data.begin() + 1))
                << "op " << op << ": get of " << size << " bytes at " << offset;
            ASSERT_EQ(data.front(), 0xA5) << "get wrote before its buffer";
            ASSERT_EQ(data.back(), 0xA5) << "get wrote past its buffer";
        }
    }
    expect_matches_reference(tensor, reference);
}

TEST_P(SplitTensorRandom, WholeSetThenPartialGets) {
    SplitTensor tensor = make(shape());
    std::mt19937_64 rng(7);
    const Bytes reference = random_bytes(rng, tensor.nbytes());
    tensor.set(reference.data(), 0, reference.size());
    for (int op = 0; op < 2000; ++op) {
        const auto [offset, size] = random_range(rng, reference.size(), logical_row_bytes(tensor));
        Bytes data(size);
        tensor.get(data.data(), offset, size);
        ASSERT_TRUE(std::equal(data.begin(), data.end(), reference.begin() + offset))
            << "op " << op << ": get of " << size << " bytes at " << offset;
    }
}

TEST_P(SplitTensorRandom, RowByRowSetBuildsTheSameShards) {
    SplitTensor tensor = make(shape());
    std::mt19937_64 rng(11);
    const Bytes reference = random_bytes(rng, tensor.nbytes());
    const size_t row = logical_row_bytes(tensor);
    for (size_t offset = 0; offset < reference.size(); offset += row) {
        tensor.set(reference.data() + offset, offset, row);
    }
    expect_matches_reference(tensor, reference);
}

TEST_P(SplitTensorRandom, Random2dBlocksMatchReference) {
    const SplitCase & c = GetParam();
    SplitTensor::Shape ne = shape();
    ne[1] = 9;
    ne[2] = 1;
    ne[3] = 1;
    SplitTensor tensor = make(ne);
    std::mt19937_64 rng(5);
    Bytes reference = random_bytes(rng, tensor.nbytes());
    tensor.set(reference.data(), 0, reference.size());

    const int64_t block = ggml_blck_size(c.type);
    const size_t row = logical_row_bytes(tensor);
    for (int op = 0; op < 2000; ++op) {
        const int64_t r0 = static_cast<int64_t>(rng() % (ne[1] + 1));
        const int64_t r1 = r0 + static_cast<int64_t>(rng() % (ne[1] - r0 + 1));
        const int64_t c0 = block * static_cast<int64_t>(rng() % (ne[0] / block + 1));
        const int64_t c1 = c0 + block * static_cast<int64_t>(rng() % ((ne[0] - c0) / block + 1));
        const ShardRange rows{r0, r1};
        const ShardRange columns{c0, c1};
        const size_t pitch = ggml_row_size(c.type, c1 - c0);
        const size_t start = ggml_row_size(c.type, c0);
        if (rng() % 2 == 0) {
            const Bytes data = random_bytes(rng, pitch * static_cast<size_t>(r1 - r0));
            tensor.set_2d(data.data(), rows, columns);
            for (int64_t r = r0; r < r1; ++r) {
                std::memcpy(reference.data() + r * row + start, data.data() + (r - r0) * pitch, pitch);
            }
        } else {
            Bytes data(pitch * static_cast<size_t>(r1 - r0));
            tensor.get_2d(data.data(), rows, columns);
            for (int64_t r = r0; r < r1; ++r) {
                ASSERT_EQ(std::memcmp(reference.data() + r * row + start, data.data() + (r - r0) * pitch, pitch), 0)
                    << "op " << op << ": row " << r << " of columns [" << c0 << ", " << c1 << ")";
            }
        }
    }
    expect_matches_reference(tensor, reference);
}

INSTANTIATE_TEST_SUITE_P(AllSplits, SplitTensorRandom, testing::ValuesIn(all_cases()), case_name);

TEST(SplitTensor, ShardsHaveTheirRangesShapes) {
    const SplitTensor::Shape ne = {256, 12, 2, 1};
    const SplitTensor columns =
        SplitTensor::split("wo", GGML_TYPE_Q8_0, ne, SplitAxis::Columns, plan_shards(256, 32, {3, 1}), cpu_bufts(2));
    EXPECT_EQ(columns.shard(0)->ne[0], 192);
    EXPECT_EQ(columns.shard(1)->ne[0], 64);
    EXPECT_EQ(columns.shard(1)->ne[1], 12);
    EXPECT_EQ(columns.shard(1)->ne[2], 2);
    EXPECT_EQ(columns.shard(1)->type, GGML_TYPE_Q8_0);
    EXPECT_STREQ(ggml_get_name(columns.shard(1)), "wo.1");
    EXPECT_EQ(ggml_backend_buffer_get_type(columns.buffer(1)), ggml_backend_cpu_buffer_type());
    EXPECT_EQ(columns.shard(1)->buffer, columns.buffer(1));

    const SplitTensor rows =
        SplitTensor::split("wq", GGML_TYPE_F32, ne, SplitAxis::Rows, plan_shards(12, 4, {1, 2}), cpu_bufts(2));
    EXPECT_EQ(rows.shard(0)->ne[1], 4);
    EXPECT_EQ(rows.shard(1)->ne[1], 8);
    EXPECT_EQ(rows.shard(1)->ne[0], 256);
    EXPECT_TRUE(ggml_is_contiguous(rows.shard(1)));
}

// y = W x computed per rank on that rank's own CPU backend, reading the shard
// directly: row shards give slices of y, column shards give partial sums.
std::vector<std::vector<float>> per_rank_matmul(const SplitTensor & weight, const std::vector<float> & x,
                                                int64_t n_columns) {
    const int64_t n_inputs = weight.ne()[0];
    std::vector<std::vector<float>> results;
    for (int rank = 0; rank < weight.n_ranks(); ++rank) {
        ggml_backend_ptr backend(ggml_backend_cpu_init());
        const ShardRange owned = weight.axis() == SplitAxis::Columns ? weight.range(rank) : ShardRange{0, n_inputs};
        ggml_init_params params = {};
        params.mem_size = 1 << 20;
        ggml_context_ptr ctx(ggml_init(params));
        ggml_tensor * x_rank = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, owned.size(), n_columns);
        for (int64_t column = 0; column < n_columns; ++column) {
            std::memcpy(static_cast<float *>(x_rank->data) + column * owned.size(),
                        x.data() + column * n_inputs + owned.begin, owned.size() * sizeof(float));
        }
        ggml_tensor * y_rank = ggml_mul_mat(ctx.get(), weight.shard(rank), x_rank);
        ggml_cgraph * graph = ggml_new_graph(ctx.get());
        ggml_build_forward_expand(graph, y_rank);
        EXPECT_EQ(ggml_backend_graph_compute(backend.get(), graph), GGML_STATUS_SUCCESS);
        const float * y = static_cast<const float *>(y_rank->data);
        results.emplace_back(y, y + ggml_nelements(y_rank));
    }
    return results;
}

TEST(SplitTensor, ShardsComputeInEachRanksGraph) {
    const int64_t n_inputs = 64, n_outputs = 12, n_columns = 3;
    std::mt19937_64 rng(17);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> w(n_inputs * n_outputs), x(n_inputs * n_columns), y(n_outputs * n_columns, 0.0f);
    for (float & value : w) {
        value = uniform(rng);
    }
    for (float & value : x) {
        value = uniform(rng);
    }
    for (int64_t column = 0; column < n_columns; ++column) {
        for (int64_t out = 0; out < n_outputs; ++out) {
            for (int64_t in = 0; in < n_inputs; ++in) {
                y[column * n_outputs + out] += w[out * n_inputs + in] * x[column * n_inputs + in];
            }
        }
    }
    const SplitTensor::Shape ne = {n_inputs, n_outputs, 1, 1};

    SplitTensor rows =
        SplitTensor::split("w", GGML_TYPE_F32, ne, SplitAxis::Rows, plan_shards(n_outputs, 1, {1, 2, 1}), cpu_bufts(3));
    rows.set(w.data(), 0, rows.nbytes());
    const auto row_results = per_rank_matmul(rows, x, n_columns);
    for (int rank = 0; rank < rows.n_ranks(); ++rank) {
        const ShardRange & owned = rows.range(rank);
        for (int64_t column = 0; column < n_columns; ++column) {
            for (int64_t out = owned.begin; out < owned.end; ++out) {
                EXPECT_NEAR(row_results[rank][column * owned.size() + out - owned.begin], y[column * n_outputs + out],
                            1e-4f);
            }
        }
    }

    SplitTensor columns =
        SplitTensor::split("w", GGML_TYPE_F32, ne, SplitAxis::Columns, plan_shards(n_inputs, 16, {3, 1}), cpu_bufts(2));
    columns.set(w.data(), 0, columns.nbytes());
    const auto partial_sums = per_rank_matmul(columns, x, n_columns);
    for (size_t i = 0; i < y.size(); ++i) {
        EXPECT_NEAR(partial_sums[0][i] + partial_sums[1][i], y[i], 1e-4f);
    }
}

TEST(SplitTensor, MirroredSetWritesEveryCopyAndGetReadsRankZero) {
    const SplitTensor::Shape ne = {64, 5, 1, 1};
    SplitTensor tensor = SplitTensor::mirrored("norm", GGML_TYPE_Q8_0, ne, cpu_bufts(3));
    std::mt19937_64 rng(3);
    Bytes reference = random_bytes(rng, tensor.nbytes());
    tensor.set(reference.data(), 0, reference.size());
    const size_t block = ggml_type_size(GGML_TYPE_Q8_0);
    const Bytes patch = random_bytes(rng, 3 * block);
    tensor.set(patch.data(), 2 * block, patch.size());
    std::copy(patch.begin(), patch.end(), reference.begin() + 2 * block);
    expect_matches_reference(tensor, reference);

    // Only rank 0 is read: stray changes to the other copies do not show.
    const Bytes stray(ggml_nbytes(tensor.shard(0)), 0);
    for (int rank = 1; rank < tensor.n_ranks(); ++rank) {
        ggml_backend_tensor_set(tensor.shard(rank), stray.data(), 0, stray.size());
    }
    Bytes whole(tensor.nbytes());
    tensor.get(whole.data(), 0, whole.size());
    EXPECT_TRUE(whole == reference);

    const ShardRange rows{1, 4};
    const ShardRange columns{32, 64};
    const Bytes block_data = random_bytes(rng, 3 * block);
    tensor.set_2d(block_data.data(), rows, columns);
    Bytes read_back(block_data.size());
    tensor.get_2d(read_back.data(), rows, columns);
    EXPECT_TRUE(read_back == block_data);
    EXPECT_EQ(tensor.range(1).end, 5);
}

TEST(SplitTensor, MovedTensorKeepsItsShards) {
    SplitTensor original =
        SplitTensor::split("w", GGML_TYPE_F32, {8, 4, 1, 1}, SplitAxis::Rows, plan_shards(4, 1, {1, 1}), cpu_bufts(2));
    ggml_tensor * shard = original.shard(1);
    SplitTensor moved = std::move(original);
    EXPECT_EQ(moved.shard(1), shard);
    const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8};
    moved.set(values.data(), 3 * 8 * sizeof(float), values.size() * sizeof(float));
    std::vector<float> back(8);
    ggml_backend_tensor_get(shard, back.data(), 8 * sizeof(float), back.size() * sizeof(float));
    EXPECT_EQ(back, values);
}

TEST(SplitTensor, QuantizedAccessThatCutsABlockIsRejected) {
    SplitTensor tensor = SplitTensor::split("w", GGML_TYPE_Q8_0, {64, 4, 1, 1}, SplitAxis::Columns,
                                            plan_shards(64, 32, {1, 1}), cpu_bufts(2));
    const size_t block = ggml_type_size(GGML_TYPE_Q8_0);
    Bytes data(4 * block);
    const std::string mid_block = thrown_message([&] { tensor.set(data.data(), 1, block); });
    EXPECT_NE(mid_block.find("cut a q8_0 block"), std::string::npos) << mid_block;
    EXPECT_NE(mid_block.find(std::to_string(block) + "-byte"), std::string::npos) << mid_block;
    EXPECT_NE(thrown_message([&] { tensor.get(data.data(), block, block + 2); }).find("block"), std::string::npos);
    EXPECT_NE(thrown_message([&] {
                  tensor.get_2d(data.data(), {0, 1}, {16, 48});
              }).find("multiples of 32"),
              std::string::npos);
    EXPECT_NO_THROW(tensor.set(data.data(), block, 3 * block));
}

TEST(SplitTensor, OutOfBoundsAccessIsRejected) {
    SplitTensor tensor = SplitTensor::split("w", GGML_TYPE_F32, {8, 4, 1, 1}, SplitAxis::Columns,
                                            plan_shards(8, 1, {1, 1}), cpu_bufts(2));
    Bytes data(256);
    EXPECT_NE(thrown_message([&] { tensor.set(data.data(), 100, 29); }).find("outside the tensor's 128 bytes"),
              std::string::npos);
    EXPECT_THROW(tensor.get(data.data(), SIZE_MAX, 2), Error);
    EXPECT_THROW(tensor.get_2d(data.data(), {0, 5}, {0, 8}), Error);
    EXPECT_THROW(tensor.get_2d(data.data(), {0, 1}, {4, 9}), Error);
    EXPECT_THROW(tensor.shard(2), Error);
    EXPECT_NO_THROW(tensor.set(data.data(), 128, 0));

    SplitTensor three_d =
        SplitTensor::split("w", GGML_TYPE_F32, {8, 4, 2, 1}, SplitAxis::Rows, plan_shards(4, 1, {1, 1}), cpu_bufts(2));
    EXPECT_NE(thrown_message([&] { three_d.get_2d(data.data(), {0, 1}, {0, 8}); }).find("2D"), std::string::npos);
}

TEST(SplitTensor, BadLayoutsAreRejected) {
    const SplitTensor::Shape ne = {64, 4, 1, 1};
    const auto cpu2 = cpu_bufts(2);
    EXPECT_NE(thrown_message([&] {
                  SplitTensor::split("w", GGML_TYPE_F32, ne, SplitAxis::Rows, {{0, 2}, {3, 4}}, cpu2);
              }).find("should begin at 2"),
              std::string::npos);
    EXPECT_NE(thrown_message([&] {
                  SplitTensor::split("w", GGML_TYPE_F32, ne, SplitAxis::Rows, {{0, 2}, {2, 3}}, cpu2);
              }).find("end at 3"),
              std::string::npos);
    EXPECT_NE(thrown_message([&] {
                  SplitTensor::split("w", GGML_TYPE_F32, ne, SplitAxis::Rows, {{0, 4}, {4, 4}}, cpu2);
              }).find("empty"),
              std::string::npos);
    EXPECT_NE(thrown_message([&] {
                  SplitTensor::split("w", GGML_TYPE_Q8_0, ne, SplitAxis::Columns, {{0, 16}, {16, 64}}, cpu2);
              }).find("cuts a block"),
              std::string::npos);
    EXPECT_NE(thrown_message([&] {
                  SplitTensor::split("w", GGML_TYPE_F32, ne, SplitAxis::Rows, {{0, 4}}, cpu2);
              }).find("1 ranges for 2 ranks"),
              std::string::npos);
    EXPECT_NE(thrown_message([&] {
                  SplitTensor::split("w", GGML_TYPE_F32, ne, SplitAxis::Mirrored, {{0, 4}}, cpu_bufts(1));
              }).find("mirrored"),
              std::string::npos);
    EXPECT_NE(thrown_message([&] {
                  SplitTensor::mirrored("w", GGML_TYPE_Q8_0, {48, 4, 1, 1}, cpu2);
              }).find("block size 32"),
              std::string::npos);
    EXPECT_NE(thrown_message([&] {
                  SplitTensor::mirrored("w", GGML_TYPE_F32, {8, 0, 1, 1}, cpu2);
              }).find("empty dimension"),
              std::string::npos);
    EXPECT_NE(thrown_message([&] { SplitTensor::mirrored("w", GGML_TYPE_F32, ne, {}); }).find("no ranks"),
              std::string::npos);
}

}  // namespace
