#pragma once
// Seeded random numbers defined entirely by this file (not by the standard
// library, whose distributions are implementation-defined, nor by libm), so a
// seed gives the same weights with every compiler and library.

#include <cstdint>
#include <string_view>

namespace llama_tp::make_model {

// splitmix64 step: turns arbitrary (even small, similar) seeds into well-mixed states.
inline uint64_t splitmix64_next(uint64_t & state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// 64-bit FNV-1a of a string; gives every tensor name its own stream.
inline uint64_t fnv1a64(std::string_view text) {
    uint64_t hash = 0xcbf29ce484222325ull;
    for (const char c : text) {
        hash ^= static_cast<unsigned char>(c);
        hash *= 0x100000001b3ull;
    }
    return hash;
}

// Seed of an independent child stream, from a parent seed and a label.
inline uint64_t derive_seed(uint64_t parent, uint64_t label) {
    uint64_t state = parent;
    const uint64_t mixed = splitmix64_next(state) ^ label;
    state = mixed;
    return splitmix64_next(state);
}

// xoshiro256** (Blackman and Vigna): fast and of good statistical quality.
class Xoshiro256StarStar {
  public:
    explicit Xoshiro256StarStar(uint64_t seed) {
        for (uint64_t & word : state_) {
            word = splitmix64_next(seed);
        }
    }

    uint64_t next() {
        const uint64_t result = rotl(state_[1] * 5, 7) * 9;
        const uint64_t shifted = state_[1] << 17;
        state_[2] ^= state_[0];
        state_[3] ^= state_[1];
        state_[1] ^= state_[2];
        state_[0] ^= state_[3];
        state_[2] ^= shifted;
        state_[3] = rotl(state_[3], 45);
        return result;
    }

  private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

    uint64_t state_[4];
};

// Approximately standard normal samples: the sum of four uniforms (Irwin-Hall),
// rescaled to unit variance, from the four 16-bit parts of one draw. Integer
// arithmetic and one exact float multiply: no libm, so bit-identical on every
// platform, and several times faster than Box-Muller. The tails end at
// +-sqrt(12) = 3.46 standard deviations, of no consequence for random weights.
class NormalSampler {
  public:
    explicit NormalSampler(uint64_t seed) : rng_(seed) {}

    float next() {
        const uint64_t bits = rng_.next();
        const int32_t sum =
            static_cast<int32_t>((bits & 0xffff) + ((bits >> 16) & 0xffff) + ((bits >> 32) & 0xffff) + (bits >> 48));
        // Each part is uniform on 0..65535 (mean 32767.5, variance ~65536^2 / 12),
        // so the sum has mean 131070 and standard deviation ~65536 / sqrt(3).
        constexpr float kScale = 1.7320508075688772f / 65536.0f;
        return static_cast<float>(sum - 131070) * kScale;
    }

  private:
    Xoshiro256StarStar rng_;
};

}  // namespace llama_tp::make_model
