// A seeded pseudo-random bijection on [0, n), evaluated one index at a time in O(1) memory: a
// balanced Feistel network over the smallest power of four >= n, cycle-walked back into range.
// The shuffled order of any epoch is therefore random-access (resume, sharding) and never
// materialized, whatever the number of windows. Only integer arithmetic: the same order on every
// platform, compiler and standard library.
#pragma once

#include <array>
#include <cstdint>

namespace sluice::data {

// SplitMix64's finalizer: a well-mixed 64-bit hash used for keys, phases and round functions.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class IndexPermutation {
 public:
  IndexPermutation(uint64_t n, uint64_t key);

  uint64_t size() const { return n_; }
  // The image of i, for i < size().
  uint64_t operator()(uint64_t i) const;

 private:
  static constexpr int kRounds = 6;
  uint64_t Encrypt(uint64_t x) const;

  uint64_t n_;
  int half_bits_ = 1;
  uint64_t half_mask_ = 1;
  std::array<uint64_t, kRounds> round_keys_{};
};

}  // namespace sluice::data
