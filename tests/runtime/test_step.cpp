#include "runtime/error.h"
#include "runtime/ranks/step.h"

#include <gtest/gtest.h>

namespace llama_tp {
namespace {

Step sample_step() {
    Step s;
    s.edits = {{1, 4, -1}, {3, 0, 2}};
    s.batch.add(17, 4, 1, false);
    s.batch.add(18, 5, 1, true);
    s.batch.add(99, 0, 3, true);
    s.batch.lora = {1.0f, 0.0f, 0.5f, 0.25f, -1.0f, 2.0f};   // two adapters
    s.batch.embd = {0.5f, -1.5f, 3.0f, 0.0f, 1e-3f, -2.0f};  // a head's hidden states, two values a token
    s.placement = placement_digest({7, 8, 300});
    return s;
}

TEST(Step, EncodesAndDecodesEveryField) {
    const Step s = sample_step();
    const Step d = Step::decode(s.encode());
    EXPECT_EQ(d.kind, Step::Kind::Decode);
    ASSERT_EQ(d.edits.size(), 2u);
    EXPECT_EQ(d.edits[1].seq, 3);
    EXPECT_EQ(d.edits[1].p1, 2);
    EXPECT_EQ(d.edits[0].p1, -1);
    EXPECT_EQ(d.batch.tokens, s.batch.tokens);
    EXPECT_EQ(d.batch.pos, s.batch.pos);
    EXPECT_EQ(d.batch.seq, s.batch.seq);
    EXPECT_EQ(d.batch.want_logits, s.batch.want_logits);
    EXPECT_EQ(d.batch.lora, s.batch.lora);
    EXPECT_EQ(d.batch.embd, s.batch.embd);
    EXPECT_EQ(d.placement, s.placement);
}

TEST(Step, LoadAndReadStepsCarryTheirImageAndSequence) {
    Step s = sample_step();
    s.kind = Step::Kind::Load;
    s.kv = {1, 2, 3, 250};
    Step d = Step::decode(s.encode());
    EXPECT_EQ(d.kind, Step::Kind::Load);
    EXPECT_EQ(d.kv, s.kv);
    Step r;
    r.kind = Step::Kind::Read;
    r.read_seq = 3;
    r.read_n = 17;
    d = Step::decode(r.encode());
    EXPECT_EQ(d.kind, Step::Kind::Read);
    EXPECT_EQ(d.read_seq, 3);
    EXPECT_EQ(d.read_n, 17);
    Step beat;
    beat.kind = Step::Kind::Heartbeat;
    EXPECT_EQ(Step::decode(beat.encode()).kind, Step::Kind::Heartbeat);
    std::vector<uint8_t> bytes = r.encode();
    bytes[4] = 9;  // no such kind
    EXPECT_THROW(Step::decode(bytes), Error);
}

TEST(Step, RefusesTruncatedOrForeignBytes) {
    std::vector<uint8_t> bytes = sample_step().encode();
    std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 3);
    EXPECT_THROW(Step::decode(cut), Error);
    bytes[0] ^= 0xff;
    EXPECT_THROW(Step::decode(bytes), Error);
    bytes[0] ^= 0xff;
    bytes.push_back(0);
    EXPECT_THROW(Step::decode(bytes), Error);
}

TEST(Step, OutputRowsAreTheRequestedOnesOrTheLast) {
    const Step s = sample_step();
    EXPECT_EQ(output_rows(s.batch), (std::vector<int32_t>{1, 2}));
    Batch none;
    none.add(1, 0, 0, false);
    none.add(2, 1, 0, false);
    EXPECT_EQ(output_rows(none), (std::vector<int32_t>{1}));
}

TEST(Step, PlacementDigestDependsOnOrderAndCells) {
    EXPECT_EQ(placement_digest({1, 2, 3}), placement_digest({1, 2, 3}));
    EXPECT_NE(placement_digest({1, 2, 3}), placement_digest({1, 3, 2}));
    EXPECT_NE(placement_digest({1, 2, 3}), placement_digest({1, 2, 4}));
}

}  // namespace
}  // namespace llama_tp
