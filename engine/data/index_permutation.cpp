#include "engine/data/index_permutation.h"

#include "runtime/check.h"

namespace sluice::data {

IndexPermutation::IndexPermutation(uint64_t n, uint64_t key) : n_(n) {
  SLUICE_CHECK_GT(n, 0u) << "a permutation of an empty range";
  // 2 * half_bits bits cover [0, n); the domain is at most 4n, so cycle-walking takes fewer than
  // four encryptions on average.
  while (half_bits_ < 32 && (uint64_t{1} << (2 * half_bits_)) < n) ++half_bits_;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  uint64_t k = Mix64(key);
  for (uint64_t& round_key : round_keys_) {
    round_key = k;
    k = Mix64(k);
  }
}

uint64_t IndexPermutation::Encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (uint64_t round_key : round_keys_) {
    const uint64_t next = left ^ (Mix64(right ^ round_key) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t IndexPermutation::operator()(uint64_t i) const {
  SLUICE_CHECK_LT(i, n_);
  // Encrypt is a bijection on the whole domain, so following it from i until it lands back in
  // [0, n) gives a bijection on [0, n).
  uint64_t x = Encrypt(i);
  while (x >= n_) x = Encrypt(x);
  return x;
}

}  // namespace sluice::data
