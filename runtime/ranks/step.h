#pragma once
// One decode step as every rank receives it: the KV-cache edits (removals,
// position shifts) since the last step, then the batch. Rank 0 decides a step on its own copy of the
// cells' bookkeeping; every rank applies it to its own KV slice, places the
// batch itself (same state, same algorithm, same cells) and checks its
// placement against rank 0's digest. A step encodes to bytes, so threads and
// processes receive it alike.

#include "runtime/batch.h"

#include <cstdint>
#include <vector>

namespace llama_tp {

// Positions [p0, p1) of a sequence: removed (delta 0), or moved by delta
// with their keys rotated to match (a context shift; those that would land
// below 0 are removed), or, where src >= 0, copied from sequence src into
// free cells of seq (a prompt another sequence has already computed). With
// save_state, no positions: the sequence's recurrent state is kept in its
// second row (Engine::seq_save_state).
struct KvEdit {
    int32_t seq = 0;
    int32_t p0 = 0;
    int32_t p1 = -1;  // < 0: to the end
    int32_t delta = 0;
    int32_t src = -1;
    int32_t save_state = 0;
};

// Decode: place the batch and run the model over it. Load: place the batch
// and fill its cells from `kv` (a KvImageLayout image of batch.size() cells)
// instead of computing them. Read: copy the cells of sequence read_seq,
// positions [0, read_n), into an image. Shutdown: followers stop.
// Heartbeat: nothing to do but answer, so that process 0 and its followers
// each learn within seconds that the other stopped while the group idles.
struct Step {
    enum class Kind : int32_t { Decode = 1, Shutdown = 2, Load = 3, Read = 4, Heartbeat = 5 };
    Kind kind = Kind::Decode;
    std::vector<KvEdit> edits;  // applied in order before the batch is placed
    Batch batch;
    uint64_t placement = 0;   // placement_digest() of the cells rank 0 chose for the batch
    std::vector<uint8_t> kv;  // Load
    int32_t read_seq = -1;    // Read
    int32_t read_n = 0;

    std::vector<uint8_t> encode() const;
    // Throws llama_tp::Error on bytes that are not a whole step.
    static Step decode(const std::vector<uint8_t> & bytes);
};

// The batch rows a step returns logits for, in order: those that asked, or
// the last row when none did (a graph has at least one output row).
std::vector<int32_t> output_rows(const Batch & batch);

// A digest of the cells a batch was placed in.
uint64_t placement_digest(const std::vector<int64_t> & cells);

}  // namespace llama_tp
