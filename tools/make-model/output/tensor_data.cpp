#include "tools/make-model/output/tensor_data.h"

#include "tools/make-model/random.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace llama_tp::make_model {
namespace {

// Rows are drawn in streams of about this many values, each from its own seed.
constexpr int64_t kStreamElements = int64_t(1) << 16;
// Values converted per slab: bounds the memory held between generation and writing.
constexpr int64_t kSlabElements = int64_t(1) << 24;

struct StreamLayout {
    int64_t row_length;
    int64_t n_rows;
    int64_t rows_per_stream;
    size_t row_bytes;

    int64_t n_streams() const { return (n_rows + rows_per_stream - 1) / rows_per_stream; }
    int64_t first_row(int64_t stream) const { return stream * rows_per_stream; }
    int64_t rows_in(int64_t stream) const { return std::min(rows_per_stream, n_rows - first_row(stream)); }
};

StreamLayout stream_layout(const TensorPlan & plan) {
    StreamLayout layout;
    layout.row_length = plan.row_length();
    layout.n_rows = plan.n_rows();
    layout.rows_per_stream = std::max<int64_t>(1, kStreamElements / layout.row_length);
    layout.row_bytes = ggml_row_size(plan.type, layout.row_length);
    return layout;
}

// Fills one stream's rows with values and encodes them into `dst`.
void encode_stream(const TensorPlan & plan, const StreamLayout & layout, uint64_t tensor_seed, int64_t stream,
                   std::vector<float> & scratch, char * dst) {
    const int64_t n_rows = layout.rows_in(stream);
    const int64_t n_values = n_rows * layout.row_length;
    NormalSampler normal(derive_seed(tensor_seed, static_cast<uint64_t>(stream)));
    const int64_t first = layout.first_row(stream) * layout.row_length;
    for (int64_t i = 0; i < n_values; ++i) {
        scratch[i] = plan.values.empty() ? plan.mean + plan.stddev * normal.next() : plan.values[first + i];
    }
    const size_t written = ggml_quantize_chunk(plan.type, scratch.data(), dst, 0, n_rows, layout.row_length, nullptr);
    GGML_ASSERT(written == static_cast<size_t>(n_rows) * layout.row_bytes);
}

// Runs work(worker, item) for items [begin, end) on up to n_workers threads.
template <typename Work>
void parallel_for(int64_t begin, int64_t end, int n_workers, const Work & work) {
    if (n_workers <= 1 || end - begin <= 1) {
        for (int64_t item = begin; item < end; ++item) {
            work(0, item);
        }
        return;
    }
    std::atomic<int64_t> next{begin};
    std::vector<std::thread> threads;
    for (int w = 0; w < n_workers; ++w) {
        threads.emplace_back([&, w] {
            for (int64_t item = next++; item < end; item = next++) {
                work(w, item);
            }
        });
    }
    for (std::thread & thread : threads) {
        thread.join();
    }
}

}  // namespace

TensorDataGenerator::TensorDataGenerator(uint64_t seed, int n_threads) : seed_(seed), n_threads_(n_threads) {}

void TensorDataGenerator::generate(const TensorPlan & plan, const Sink & sink) const {
    const StreamLayout layout = stream_layout(plan);
    const uint64_t tensor_seed = derive_seed(seed_, fnv1a64(plan.name));
    const int64_t n_streams = layout.n_streams();
    const int64_t streams_per_slab = std::max<int64_t>(1, kSlabElements / (layout.rows_per_stream * layout.row_length));
    const int n_workers = static_cast<int>(std::min<int64_t>(n_threads_, std::min(n_streams, streams_per_slab)));

    // Allocated up front: a worker thread must not fail on allocation.
    std::vector<std::vector<float>> scratch(std::max(n_workers, 1),
                                            std::vector<float>(layout.rows_per_stream * layout.row_length));
    std::vector<char> slab;
    for (int64_t first = 0; first < n_streams; first += streams_per_slab) {
        const int64_t last = std::min(n_streams, first + streams_per_slab);
        const int64_t slab_first_row = layout.first_row(first);
        const int64_t slab_rows = layout.first_row(last - 1) + layout.rows_in(last - 1) - slab_first_row;
        slab.resize(static_cast<size_t>(slab_rows) * layout.row_bytes);
        parallel_for(first, last, n_workers, [&](int worker, int64_t stream) {
            char * dst = slab.data() + (layout.first_row(stream) - slab_first_row) * layout.row_bytes;
            encode_stream(plan, layout, tensor_seed, stream, scratch[worker], dst);
        });
        sink(slab.data(), slab.size());
    }
}

}  // namespace llama_tp::make_model
