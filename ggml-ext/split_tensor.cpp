#include "ggml-ext/split_tensor.h"

#include <algorithm>
#include <string>
#include <utility>

#include "ggml-ext/error.h"

namespace llama_tp {

namespace {

std::string range_text(int64_t begin, int64_t end) {
    return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

std::string shape_text(const SplitTensor::Shape & ne) {
    std::string text = "[";
    for (size_t i = 0; i < ne.size(); ++i) {
        text += (i ? ", " : "") + std::to_string(ne[i]);
    }
    return text + "]";
}

void check_type_and_shape(const std::string & name, ggml_type type, const SplitTensor::Shape & ne) {
    if (type < 0 || type >= GGML_TYPE_COUNT || ggml_blck_size(type) <= 0) {
        throw Error(name + ": ggml type " + std::to_string(static_cast<int>(type)) + " is not a usable tensor type");
    }
    for (int64_t extent : ne) {
        if (extent < 1) {
            throw Error(name + ": shape " + shape_text(ne) + " has an empty dimension; every ne[i] must be >= 1");
        }
    }
    if (ne[0] % ggml_blck_size(type) != 0) {
        throw Error(name + ": ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the " + ggml_type_name(type) +
                    " block size " + std::to_string(ggml_blck_size(type)));
    }
}

void check_bufts(const std::string & name, const std::vector<ggml_backend_buffer_type_t> & bufts) {
    if (bufts.empty()) {
        throw Error(name + ": no ranks given; pass one buffer type per rank");
    }
    for (size_t rank = 0; rank < bufts.size(); ++rank) {
        if (bufts[rank] == nullptr) {
            throw Error(name + ": buffer type of rank " + std::to_string(rank) + " is null");
        }
    }
}

// The ranges must tile [0, extent) in rank order, each non-empty and aligned.
void check_ranges(const std::string & name, const std::vector<ShardRange> & ranges, int64_t extent, int64_t alignment,
                  const char * axis_name) {
    int64_t expected_begin = 0;
    for (size_t rank = 0; rank < ranges.size(); ++rank) {
        const ShardRange & range = ranges[rank];
        const std::string where = name + ": rank " + std::to_string(rank) + "'s " + axis_name + " range " +
                                  range_text(range.begin, range.end);
        if (range.begin != expected_begin) {
            throw Error(where + " should begin at " + std::to_string(expected_begin) +
                        ": ranges must be contiguous and in rank order (see plan_shards)");
        }
        if (range.size() <= 0) {
            throw Error(where + " is empty: every rank needs at least one " + axis_name + " element");
        }
        if (range.begin % alignment != 0 || range.end % alignment != 0) {
            throw Error(where + " cuts a block: boundaries must be multiples of " + std::to_string(alignment));
        }
        expected_begin = range.end;
    }
    if (expected_begin != extent) {
        throw Error(name + ": the " + axis_name + " ranges end at " + std::to_string(expected_begin) +
                    " but the axis has " + std::to_string(extent) + " elements");
    }
}

int split_dim(SplitAxis axis) {
    return axis == SplitAxis::Columns ? 0 : 1;
}

}  // namespace

const char * split_axis_name(SplitAxis axis) {
    switch (axis) {
        case SplitAxis::Columns:
            return "column";
        case SplitAxis::Rows:
            return "row";
        case SplitAxis::Mirrored:
            return "mirrored";
    }
    return "unknown";
}

SplitTensor SplitTensor::split(const std::string & name, ggml_type type, const Shape & ne, SplitAxis axis,
                               const std::vector<ShardRange> & ranges,
                               const std::vector<ggml_backend_buffer_type_t> & bufts) {
    if (axis == SplitAxis::Mirrored) {
        throw Error(name + ": split() needs the Columns or Rows axis; use SplitTensor::mirrored for full copies");
    }
    check_type_and_shape(name, type, ne);
    check_bufts(name, bufts);
    if (ranges.size() != bufts.size()) {
        throw Error(name + ": " + std::to_string(ranges.size()) + " ranges for " + std::to_string(bufts.size()) +
                    " ranks; give one range and one buffer type per rank");
    }
    const int64_t alignment = axis == SplitAxis::Columns ? ggml_blck_size(type) : 1;
    check_ranges(name, ranges, ne[split_dim(axis)], alignment, split_axis_name(axis));
    return SplitTensor(name, type, ne, axis, ranges, bufts);
}

SplitTensor SplitTensor::mirrored(const std::string & name, ggml_type type, const Shape & ne,
                                  const std::vector<ggml_backend_buffer_type_t> & bufts) {
    check_type_and_shape(name, type, ne);
    check_bufts(name, bufts);
    const std::vector<ShardRange> all_rows(bufts.size(), ShardRange{0, ne[1]});
    return SplitTensor(name, type, ne, SplitAxis::Mirrored, all_rows, bufts);
}

SplitTensor::SplitTensor(const std::string & name, ggml_type type, const Shape & ne, SplitAxis axis,
                         const std::vector<ShardRange> & ranges, const std::vector<ggml_backend_buffer_type_t> & bufts)
    : name_(name), type_(type), ne_(ne), axis_(axis), ranges_(ranges) {
    allocate_shards(bufts);
}

void SplitTensor::allocate_shards(const std::vector<ggml_backend_buffer_type_t> & bufts) {
    ggml_init_params params = {};
    params.mem_size = bufts.size() * ggml_tensor_overhead();
    params.no_alloc = true;  // shards live in the rank buffers, not in the context
    ctx_.reset(ggml_init(params));
    if (!ctx_) {
        throw Error(name_ + ": could not create a ggml context for " + std::to_string(bufts.size()) + " shards");
    }
    for (size_t rank = 0; rank < bufts.size(); ++rank) {
        Shape shard_ne = ne_;
        if (axis_ != SplitAxis::Mirrored) {
            shard_ne[split_dim(axis_)] = ranges_[rank].size();
        }
        ggml_tensor * shard = ggml_new_tensor(ctx_.get(), type_, GGML_MAX_DIMS, shard_ne.data());
        ggml_format_name(shard, "%s.%zu", name_.c_str(), rank);

        const size_t bytes = ggml_backend_buft_get_alloc_size(bufts[rank], shard);
        ggml_backend_buffer_ptr buffer(ggml_backend_buft_alloc_buffer(bufts[rank], bytes));
        if (!buffer) {
            throw Error(name_ + ": could not allocate " + std::to_string(bytes) + " bytes in " +
                        ggml_backend_buft_name(bufts[rank]) + " for rank " + std::to_string(rank) + "'s shard");
        }
        if (ggml_backend_tensor_alloc(buffer.get(), shard, ggml_backend_buffer_get_base(buffer.get())) !=
            GGML_STATUS_SUCCESS) {
            throw Error(name_ + ": could not place rank " + std::to_string(rank) + "'s shard in its " +
                        ggml_backend_buft_name(bufts[rank]) + " buffer");
        }
        buffers_.push_back(std::move(buffer));
        shards_.push_back(shard);
    }
}

const ShardRange & SplitTensor::range(int rank) const {
    check_rank(rank);
    return ranges_[rank];
}

ggml_tensor * SplitTensor::shard(int rank) const {
    check_rank(rank);
    return shards_[rank];
}

ggml_backend_buffer_t SplitTensor::buffer(int rank) const {
    check_rank(rank);
    return buffers_[rank].get();
}

size_t SplitTensor::nbytes() const {
    return ggml_row_size(type_, ne_[0]) * static_cast<size_t>(ne_[1] * ne_[2] * ne_[3]);
}

void SplitTensor::check_rank(int rank) const {
    if (rank < 0 || rank >= n_ranks()) {
        throw Error(name_ + ": rank " + std::to_string(rank) + " out of range; the tensor has " +
                    std::to_string(n_ranks()) + " ranks");
    }
}

void SplitTensor::check_byte_range(size_t offset, size_t size) const {
    const size_t total = nbytes();
    if (offset > total || size > total - offset) {
        throw Error(name_ + ": bytes " + range_text(offset, offset + size) + " are outside the tensor's " +
                    std::to_string(total) + " bytes");
    }
    const size_t block_bytes = ggml_type_size(type_);
    if (ggml_is_quantized(type_) && (offset % block_bytes != 0 || size % block_bytes != 0)) {
        throw Error(name_ + ": bytes " + range_text(offset, offset + size) + " cut a " + ggml_type_name(type_) +
                    " block; offset and size must be multiples of its " + std::to_string(block_bytes) + "-byte block");
    }
}

void SplitTensor::check_block_2d(ShardRange rows, ShardRange columns) const {
    if (ne_[2] != 1 || ne_[3] != 1) {
        throw Error(name_ + ": 2D access needs a 2D tensor, but its shape is " + shape_text(ne_) +
                    "; use set/get with byte offsets");
    }
    if (rows.begin < 0 || rows.end < rows.begin || rows.end > ne_[1]) {
        throw Error(name_ + ": rows " + range_text(rows.begin, rows.end) + " are not within [0, " +
                    std::to_string(ne_[1]) + ")");
    }
    if (columns.begin < 0 || columns.end < columns.begin || columns.end > ne_[0]) {
        throw Error(name_ + ": columns " + range_text(columns.begin, columns.end) + " are not within [0, " +
                    std::to_string(ne_[0]) + ")");
    }
    const int64_t block = ggml_blck_size(type_);
    if (columns.begin % block != 0 || columns.end % block != 0) {
        throw Error(name_ + ": columns " + range_text(columns.begin, columns.end) + " cut a " + ggml_type_name(type_) +
                    " block; column bounds must be multiples of " + std::to_string(block));
    }
}

// The logical layout seen along the split axis is [outer][axis][unit]: a unit
// is one block of a row (columns) or one whole row (rows). Rank r owns a run of
// units in every outer slab, which is one contiguous piece of its shard.
std::vector<SplitTensor::StridedCopy> SplitTensor::plan_copies(size_t offset, size_t size) const {
    std::vector<StridedCopy> copies;
    if (size == 0) {
        return copies;
    }
    if (axis_ == SplitAxis::Mirrored) {
        for (int rank = 0; rank < n_ranks(); ++rank) {
            copies.push_back({rank, 0, offset, size, 1, 0, 0});
        }
        return copies;
    }
    const bool by_columns = axis_ == SplitAxis::Columns;
    const int64_t unit_elems = by_columns ? ggml_blck_size(type_) : 1;
    const size_t unit_bytes = by_columns ? ggml_type_size(type_) : ggml_row_size(type_, ne_[0]);
    const size_t slab_bytes = static_cast<size_t>(ne_[split_dim(axis_)] / unit_elems) * unit_bytes;
    const size_t end = offset + size;
    const size_t first_slab = offset / slab_bytes;
    const size_t last_slab = (end - 1) / slab_bytes;

    for (int rank = 0; rank < n_ranks(); ++rank) {
        const size_t owned_start = static_cast<size_t>(ranges_[rank].begin / unit_elems) * unit_bytes;
        const size_t owned_bytes = static_cast<size_t>(ranges_[rank].size() / unit_elems) * unit_bytes;

        // The rank's piece of one slab, clipped to [offset, end).
        auto add_clipped = [&](size_t slab) {
            const size_t piece_begin = slab * slab_bytes + owned_start;
            const size_t begin = std::max(piece_begin, offset);
            const size_t stop = std::min(piece_begin + owned_bytes, end);
            if (begin < stop) {
                copies.push_back(
                    {rank, begin - offset, slab * owned_bytes + (begin - piece_begin), stop - begin, 1, 0, 0});
            }
        };
        add_clipped(first_slab);
        if (last_slab > first_slab + 1) {
            const size_t slab = first_slab + 1;
            copies.push_back({rank, slab * slab_bytes + owned_start - offset, slab * owned_bytes, owned_bytes,
                              last_slab - slab, slab_bytes, owned_bytes});
        }
        if (last_slab > first_slab) {
            add_clipped(last_slab);
        }
    }
    return copies;
}

std::vector<SplitTensor::StridedCopy> SplitTensor::plan_copies_2d(ShardRange rows, ShardRange columns) const {
    std::vector<StridedCopy> copies;
    if (rows.size() == 0 || columns.size() == 0) {
        return copies;
    }
    const size_t data_pitch = ggml_row_size(type_, columns.size());
    const size_t n_rows = static_cast<size_t>(rows.size());
    const size_t full_row = ggml_row_size(type_, ne_[0]);
    const size_t column_start = ggml_row_size(type_, columns.begin);

    for (int rank = 0; rank < n_ranks(); ++rank) {
        const ShardRange & owned = ranges_[rank];
        if (axis_ == SplitAxis::Mirrored) {
            copies.push_back({rank, 0, rows.begin * full_row + column_start, data_pitch, n_rows, data_pitch, full_row});
        } else if (axis_ == SplitAxis::Columns) {
            const int64_t begin = std::max(owned.begin, columns.begin);
            const int64_t end = std::min(owned.end, columns.end);
            if (begin < end) {
                const size_t shard_row = ggml_row_size(type_, owned.size());
                copies.push_back({rank, ggml_row_size(type_, begin - columns.begin),
                                  rows.begin * shard_row + ggml_row_size(type_, begin - owned.begin),
                                  ggml_row_size(type_, end - begin), n_rows, data_pitch, shard_row});
            }
        } else {
            const int64_t begin = std::max(owned.begin, rows.begin);
            const int64_t end = std::min(owned.end, rows.end);
            if (begin < end) {
                copies.push_back({rank, (begin - rows.begin) * data_pitch,
                                  (begin - owned.begin) * full_row + column_start, data_pitch,
                                  static_cast<size_t>(end - begin), data_pitch, full_row});
            }
        }
    }
    return copies;
}

void SplitTensor::write(const void * data, const std::vector<StridedCopy> & copies) {
    const char * bytes = static_cast<const char *>(data);
    for (const StridedCopy & copy : copies) {
        ggml_backend_tensor_set_2d(shards_[copy.rank], bytes + copy.data_offset, copy.shard_offset, copy.size,
                                   copy.n_copies, copy.shard_stride, copy.data_stride);
    }
}

// A mirrored tensor is read from rank 0 alone; every other copy is the same.
void SplitTensor::read(void * data, const std::vector<StridedCopy> & copies) const {
    char * bytes = static_cast<char *>(data);
    for (const StridedCopy & copy : copies) {
        if (axis_ == SplitAxis::Mirrored && copy.rank != 0) {
            continue;
        }
        ggml_backend_tensor_get_2d(shards_[copy.rank], bytes + copy.data_offset, copy.shard_offset, copy.size,
                                   copy.n_copies, copy.shard_stride, copy.data_stride);
    }
}

void SplitTensor::set(const void * data, size_t offset, size_t size) {
    check_byte_range(offset, size);
    write(data, plan_copies(offset, size));
}

void SplitTensor::get(void * data, size_t offset, size_t size) const {
    check_byte_range(offset, size);
    read(data, plan_copies(offset, size));
}

void SplitTensor::set_2d(const void * data, ShardRange rows, ShardRange columns) {
    check_block_2d(rows, columns);
    write(data, plan_copies_2d(rows, columns));
}

void SplitTensor::get_2d(void * data, ShardRange rows, ShardRange columns) const {
    check_block_2d(rows, columns);
    read(data, plan_copies_2d(rows, columns));
}

}  // namespace llama_tp
