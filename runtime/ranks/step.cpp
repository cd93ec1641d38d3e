#include "runtime/ranks/step.h"

#include "runtime/error.h"

#include <cstring>

namespace llama_tp {
namespace {

constexpr uint32_t kMagic = 0x53505454;  // "TTPS"

class Writer {
  public:
    template <typename T>
    void put(const T & v) {
        const size_t at = bytes.size();
        bytes.resize(at + sizeof(T));
        std::memcpy(bytes.data() + at, &v, sizeof(T));
    }
    template <typename T>
    void put_array(const std::vector<T> & v) {
        put((uint32_t) v.size());
        const size_t at = bytes.size();
        bytes.resize(at + v.size() * sizeof(T));
        if (!v.empty()) std::memcpy(bytes.data() + at, v.data(), v.size() * sizeof(T));
    }
    std::vector<uint8_t> bytes;
};

class Reader {
  public:
    explicit Reader(const std::vector<uint8_t> & b) : b_(b) {}
    template <typename T>
    T get() {
        T v;
        need(sizeof(T));
        std::memcpy(&v, b_.data() + at_, sizeof(T));
        at_ += sizeof(T);
        return v;
    }
    template <typename T>
    std::vector<T> get_array() {
        const uint32_t n = get<uint32_t>();
        need((size_t) n * sizeof(T));
        std::vector<T> v(n);
        if (n) std::memcpy(v.data(), b_.data() + at_, (size_t) n * sizeof(T));
        at_ += (size_t) n * sizeof(T);
        return v;
    }
    bool done() const { return at_ == b_.size(); }

  private:
    void need(size_t n) const {
        if (b_.size() - at_ < n) throw Error("malformed step message: " + std::to_string(b_.size()) + " bytes");
    }
    const std::vector<uint8_t> & b_;
    size_t at_ = 0;
};

}  // namespace

std::vector<uint8_t> Step::encode() const {
    Writer w;
    w.put(kMagic);
    w.put((int32_t) kind);
    w.put_array(edits);
    w.put_array(batch.tokens);
    w.put_array(batch.pos);
    w.put_array(batch.seq);
    w.put_array(batch.want_logits);
    w.put_array(batch.lora);
    w.put_array(batch.embd);
    w.put(placement);
    w.put_array(kv);
    w.put(read_seq);
    w.put(read_n);
    return std::move(w.bytes);
}

Step Step::decode(const std::vector<uint8_t> & bytes) {
    Reader r(bytes);
    if (r.get<uint32_t>() != kMagic) throw Error("malformed step message: bad magic");
    Step s;
    const int32_t kind = r.get<int32_t>();
    if (kind < (int32_t) Kind::Decode || kind > (int32_t) Kind::Heartbeat) {
        throw Error("malformed step message: kind " + std::to_string(kind));
    }
    s.kind = (Kind) kind;
    s.edits = r.get_array<KvEdit>();
    s.batch.tokens = r.get_array<int32_t>();
    s.batch.pos = r.get_array<int32_t>();
    s.batch.seq = r.get_array<int32_t>();
    s.batch.want_logits = r.get_array<uint8_t>();
    s.batch.lora = r.get_array<float>();
    s.batch.embd = r.get_array<float>();
    s.placement = r.get<uint64_t>();
    s.kv = r.get_array<uint8_t>();
    s.read_seq = r.get<int32_t>();
    s.read_n = r.get<int32_t>();
    const size_t n = s.batch.tokens.size();
    if (!r.done() || s.batch.pos.size() != n || s.batch.seq.size() != n || s.batch.want_logits.size() != n ||
        (n > 0 && (s.batch.lora.size() % n != 0 || s.batch.embd.size() % n != 0))) {
        throw Error("malformed step message: inconsistent batch");
    }
    return s;
}

std::vector<int32_t> output_rows(const Batch & batch) {
    std::vector<int32_t> rows;
    for (int i = 0; i < batch.size(); ++i) {
        if (batch.want_logits[i]) rows.push_back(i);
    }
    if (rows.empty() && batch.size() > 0) rows.push_back(batch.size() - 1);
    return rows;
}

uint64_t placement_digest(const std::vector<int64_t> & cells) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (int64_t c : cells) {
        for (int b = 0; b < 8; ++b) {
            h ^= (uint64_t) ((c >> (8 * b)) & 0xff);
            h *= 1099511628211ull;
        }
    }
    return h;
}

}  // namespace llama_tp
