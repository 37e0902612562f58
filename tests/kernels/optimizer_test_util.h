// What the fused CPU optimizer tests share (adam_test.cpp, lion_test.cpp): forcing an ISA,
// skipping one the CPU lacks, cheap random values, and buffers at chosen misalignments with
// sentinel guards that catch writes outside them.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/ref/adam_ref.h"
#include "kernels/ref/half.h"

namespace sluice::kernels::optimizer_test {

inline constexpr size_t kGuard = 64;                // sentinel elements around every buffer
inline constexpr uint32_t kSentinel = 0x7fa5a5a5u;  // a NaN no kernel produces

// Forces `isa` for the test's duration.
class IsaScope {
 public:
  explicit IsaScope(Isa isa) { ForceIsa(isa); }
  ~IsaScope() { ClearForcedIsa(); }
};

// Why this CPU cannot run `isa`, or empty.
inline std::string MissingIsa(Isa isa) {
  const CpuFeatures& f = DetectCpuFeatures();
  if (isa == Isa::kAvx512 && !f.avx512) return "CPU lacks AVX-512";
  if (isa == Isa::kAvx2 && !f.avx2) return "CPU lacks AVX2";
  return "";
}

#define SKIP_WITHOUT(isa)                                                     \
  do {                                                                        \
    std::string missing = ::sluice::kernels::optimizer_test::MissingIsa(isa); \
    if (!missing.empty()) {                                                   \
      GTEST_SKIP() << missing;                                                \
    }                                                                         \
  } while (0)

// Uniform in [-1, 1), cheap enough for million-element multi-step cases (splitmix64).
inline float NextUniform(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * 0x1p-23f - 1.0f;
}

// A buffer of `count` elements of `element_size` bytes starting `offset` elements past a 64-byte
// boundary, with sentinel guards on both sides to catch writes outside the range.
class GuardedBuffer {
 public:
  GuardedBuffer(size_t count, size_t element_size, size_t offset)
      : count_(count), element_size_(element_size), offset_(offset) {
    storage_.assign((count * element_size + 2 * kGuard * 4 + 64 + offset * element_size) / 4 + 1,
                    kSentinel);
    uintptr_t base = reinterpret_cast<uintptr_t>(storage_.data()) + kGuard * 4;
    base = (base + 63) / 64 * 64;
    data_ = reinterpret_cast<char*>(base) + offset * element_size;
  }
  void* data() { return data_; }
  float* f32() { return reinterpret_cast<float*>(data_); }
  uint16_t* u16() { return reinterpret_cast<uint16_t*>(data_); }

  // True when nothing outside [data, data + count) changed.
  bool GuardsIntact() const {
    const char* first = reinterpret_cast<const char*>(storage_.data());
    const char* last = first + storage_.size() * 4;
    const char* begin = data_;
    const char* end = data_ + count_ * element_size_;
    auto untouched = [&](const char* from, const char* to) {
      for (const char* at = from; at < to; ++at) {
        size_t byte = static_cast<size_t>(at - first);
        if (static_cast<char>(kSentinel >> (8 * (byte % 4))) != *at) return false;
      }
      return true;
    };
    return untouched(first, begin) && untouched(end, last);
  }

 private:
  size_t count_;
  size_t element_size_;
  size_t offset_;
  std::vector<uint32_t> storage_;
  char* data_;
};

// Training-like gradients for `count` elements in `type`: cubed uniforms, mostly small with a few
// large ones.
inline void FillGrads(GuardedBuffer& grads, AdamGradType type, size_t count, uint32_t seed) {
  uint64_t rng = seed;
  for (size_t i = 0; i < count; ++i) {
    float u = NextUniform(rng);
    float g = 4.0f * u * u * u;
    switch (type) {
      case AdamGradType::kF32:
        grads.f32()[i] = g;
        break;
      case AdamGradType::kBF16:
        grads.u16()[i] = F32ToBf16(g);
        break;
      case AdamGradType::kF16:
        grads.u16()[i] = F32ToF16(g);
        break;
    }
  }
}

inline uint16_t RoundCopy(AdamCopyType type, float value) {
  return type == AdamCopyType::kF16 ? F32ToF16(value) : F32ToBf16(value);
}

}  // namespace sluice::kernels::optimizer_test
