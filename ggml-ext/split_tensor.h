#pragma once
// A logical ggml tensor stored as one shard per rank. Each rank's shard is an
// ordinary contiguous ggml tensor on that rank's device, holding either a range
// of the logical tensor's columns (ne[0]), a range of its rows (ne[1]), or a
// full copy (mirrored). Reads and writes address the logical tensor's byte
// layout, as if it were one contiguous ggml tensor, and are mapped to strided
// copies into the shards.
//
// Ownership: a SplitTensor owns everything it uses. It creates the shard
// tensors in a ggml context of its own and allocates each shard in a buffer
// of its own from the buffer type given for that rank; both are freed with the
// SplitTensor. The shard tensors may be used in any rank's graph while the
// SplitTensor lives. Movable, not copyable.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "ggml-ext/shard_range.h"
#include "ggml.h"

namespace llama_tp {

enum class SplitAxis {
    Columns,   // ne[0]: every rank holds a range of columns of every row
    Rows,      // ne[1]: every rank holds a range of rows (in every ne[2], ne[3] slice)
    Mirrored,  // no split: every rank holds a full copy
};

const char * split_axis_name(SplitAxis axis);

class SplitTensor {
  public:
    using Shape = std::array<int64_t, GGML_MAX_DIMS>;

    // Splits along axis (Columns or Rows): rank r holds ranges[r] of that axis.
    // The ranges must be non-empty, contiguous and cover the axis in rank
    // order (plan_shards makes such ranges); column ranges of a quantized type
    // must be whole blocks. bufts[r] is where rank r's shard is allocated.
    static SplitTensor split(const std::string & name, ggml_type type, const Shape & ne, SplitAxis axis,
                             const std::vector<ShardRange> & ranges,
                             const std::vector<ggml_backend_buffer_type_t> & bufts);

    // Every rank holds a full copy, allocated in bufts[r].
    static SplitTensor mirrored(const std::string & name, ggml_type type, const Shape & ne,
                                const std::vector<ggml_backend_buffer_type_t> & bufts);

    const std::string & name() const { return name_; }
    ggml_type type() const { return type_; }
    const Shape & ne() const { return ne_; }
    SplitAxis axis() const { return axis_; }
    int n_ranks() const { return static_cast<int>(shards_.size()); }

    // The range of the split axis held by rank; mirrored: all rows, [0, ne[1]).
    const ShardRange & range(int rank) const;
    const std::vector<ShardRange> & ranges() const { return ranges_; }

    ggml_tensor * shard(int rank) const;
    ggml_backend_buffer_t buffer(int rank) const;

    // Size of the logical tensor's contiguous byte layout.
    size_t nbytes() const;

    // Writes/reads size bytes at offset of the logical layout. For quantized
    // types, offset and size must be whole blocks; otherwise any bytes. Set
    // writes every copy of a mirrored tensor; get reads rank 0's copy.
    void set(const void * data, size_t offset, size_t size);
    void get(void * data, size_t offset, size_t size) const;

    // Writes/reads the block rows x columns (half-open ranges) of a 2D logical
    // tensor (ne[2] == ne[3] == 1). data holds the block's rows packed, each
    // ggml_row_size(type, columns.size()) bytes. Quantized: whole-block columns.
    void set_2d(const void * data, ShardRange rows, ShardRange columns);
    void get_2d(void * data, ShardRange rows, ShardRange columns) const;

  private:
    // One strided transfer between a caller's buffer and one shard: n_copies
    // pieces of size bytes, advancing by data_stride and shard_stride.
    struct StridedCopy {
        int rank;
        size_t data_offset;
        size_t shard_offset;
        size_t size;
        size_t n_copies;
        size_t data_stride;
        size_t shard_stride;
    };

    SplitTensor(const std::string & name, ggml_type type, const Shape & ne, SplitAxis axis,
                const std::vector<ShardRange> & ranges, const std::vector<ggml_backend_buffer_type_t> & bufts);

    void allocate_shards(const std::vector<ggml_backend_buffer_type_t> & bufts);
    void check_rank(int rank) const;
    void check_byte_range(size_t offset, size_t size) const;
    void check_block_2d(ShardRange rows, ShardRange columns) const;

    std::vector<StridedCopy> plan_copies(size_t offset, size_t size) const;
    std::vector<StridedCopy> plan_copies_2d(ShardRange rows, ShardRange columns) const;
    void write(const void * data, const std::vector<StridedCopy> & copies);
    void read(void * data, const std::vector<StridedCopy> & copies) const;

    std::string name_;
    ggml_type type_;
    Shape ne_;
    SplitAxis axis_;
    std::vector<ShardRange> ranges_;
    ggml_context_ptr ctx_;
    std::vector<ggml_backend_buffer_ptr> buffers_;
    std::vector<ggml_tensor *> shards_;
};

}  // namespace llama_tp
