#include "runtime/model/data_digest.h"
#include "runtime/model/gguf_file.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

#include <gtest/gtest.h>

#include "tests/runtime/gguf_edit.h"

namespace llama_tp {
namespace {

std::vector<uint8_t> sample_bytes(size_t n) {
    std::vector<uint8_t> b(n);
    for (size_t i = 0; i < n; ++i) b[i] = (uint8_t) (i * 37 + 11);
    return b;
}

TEST(DataDigest, EveryBitOfEveryByteCounts) {
    std::vector<uint8_t> b = sample_bytes(103);  // lanes, words and a tail
    const uint64_t d = digest_bytes(b.data(), b.size(), 0);
    EXPECT_EQ(d, digest_bytes(b.data(), b.size(), 0));
    EXPECT_NE(d, digest_bytes(b.data(), b.size(), 1));
    for (size_t i = 0; i < b.size(); ++i) {
        for (int bit = 0; bit < 8; ++bit) {
            b[i] ^= (uint8_t) (1 << bit);
            EXPECT_NE(d, digest_bytes(b.data(), b.size(), 0)) << "byte " << i << " bit " << bit;
            b[i] ^= (uint8_t) (1 << bit);
        }
    }
}

TEST(DataDigest, LengthCountsToo) {
    std::vector<uint8_t> b(64, 0);
    EXPECT_NE(digest_bytes(b.data(), 63, 0), digest_bytes(b.data(), 64, 0));
    EXPECT_NE(digest_bytes(b.data(), 0, 0), digest_bytes(b.data(), 8, 0));
}

std::vector<char> read_all(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

void write_all(const std::string & path, const std::vector<char> & bytes) {
    std::ofstream(path, std::ios::binary).write(bytes.data(), (std::streamsize) bytes.size());
}

TEST(DataDigest, AModelsTensorDataAnyThreadsAndOneChangedByte) {
    GgufFile model(LLAMA_TP_TEST_MODEL);
    const uint64_t d = tensor_data_digest(model, 1);
    EXPECT_EQ(d, tensor_data_digest(model, 3));

    // One byte of tensor data changed, the header alike.
    std::vector<char> bytes = read_all(LLAMA_TP_TEST_MODEL);
    const GgufFile::DataRange data = model.part_data(0);
    ASSERT_LT(data.begin, data.end);
    ASSERT_EQ(data.end, bytes.size());
    const std::string path = test::temp_path("one-byte.gguf");
    for (const uint64_t at : {data.begin, (data.begin + data.end) / 2, data.end - 1}) {
        bytes[at] ^= 1;
        write_all(path, bytes);
        GgufFile changed(path);
        EXPECT_EQ(changed.header_digest(), model.header_digest());
        EXPECT_NE(tensor_data_digest(changed, 2), d) << "byte " << at;
        bytes[at] ^= 1;
    }
    std::remove(path.c_str());
}

}  // namespace
}  // namespace llama_tp
