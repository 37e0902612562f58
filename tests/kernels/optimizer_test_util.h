// What the fused CPU optimizer tests share (adam_test.cpp, lion_test.cpp, lamb_test.cpp): forcing
// an ISA, skipping one the CPU lacks, cheap random values, buffers at chosen misalignments with
// sentinel guards that catch writes outside them, the parameter grid and its names, and the
// checks every optimizer's copy and dispatch must pass.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
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

// One optimizer's buffers at chosen misalignments (or all 64-byte aligned): fp32 parameters
// uniform from `seed`, zero moments, the gradient in `grad_type` and a 16-bit copy. Lion keeps no
// second moment: its exp_avg_sq is empty and never written.
struct OptimizerBuffers {
  OptimizerBuffers(size_t n, AdamGradType grad_type, AdamCopyType copy_type, bool aligned,
                   uint64_t seed, bool second_moment)
      : params(n, 4, aligned ? 0 : 1),
        exp_avg(n, 4, aligned ? 0 : 2),
        exp_avg_sq(second_moment ? n : 0, 4, aligned ? 0 : 3),
        grads(n, AdamGradTypeSize(grad_type), aligned ? 0 : 5),
        copy(n, 2, aligned ? 0 : 7),
        count(n),
        grad_type(grad_type),
        copy_type(copy_type) {
    uint64_t rng = seed;
    for (size_t i = 0; i < n; ++i) {
      params.f32()[i] = NextUniform(rng);
      exp_avg.f32()[i] = 0.0f;
      if (second_moment) exp_avg_sq.f32()[i] = 0.0f;
    }
  }

  void SetGrads(uint32_t seed) { FillGrads(grads, grad_type, count, seed); }

  // The copy buffer when a copy type is named, else null (as the kernels require).
  void* CopyOrNull() { return copy_type == AdamCopyType::kNone ? nullptr : copy.data(); }

  bool GuardsIntact() const {
    return params.GuardsIntact() && exp_avg.GuardsIntact() && exp_avg_sq.GuardsIntact() &&
           copy.GuardsIntact();
  }

  GuardedBuffer params, exp_avg, exp_avg_sq, grads, copy;
  size_t count;
  AdamGradType grad_type;
  AdamCopyType copy_type;
};

// Index of the first element whose bits differ, or -1.
inline int64_t FirstBitMismatch(const float* got, const float* want, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i])) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

// Index of the first copy element that is not round-to-nearest-even of its updated fp32
// parameter, or -1.
inline int64_t FirstCopyMismatch(AdamCopyType type, const uint16_t* copy, const float* params,
                                 size_t n) {
  int64_t bad = -1;
  for (size_t i = 0; i < n && bad < 0; ++i) {
    if (copy[i] != RoundCopy(type, params[i])) bad = static_cast<int64_t>(i);
  }
  return bad;
}

// The copy (when there is one) is round-to-nearest-even of the kernel's own updated fp32
// parameter.
inline void ExpectCopyIsRneOfParams(OptimizerBuffers& kernel) {
  if (kernel.copy_type != AdamCopyType::kNone) {
    EXPECT_EQ(
        FirstCopyMismatch(kernel.copy_type, kernel.copy.u16(), kernel.params.f32(), kernel.count),
        -1)
        << "copy differs from RNE of the updated parameter";
  }
}

// The kernel-against-reference grid: isa x grad dtype x copy dtype x size x aligned start.
using CaseParam = std::tuple<Isa, AdamGradType, AdamCopyType, size_t, bool>;

inline auto AllIsas() { return ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512); }

// Every isa, gradient dtype and copy dtype, at each of `sizes`, aligned and not.
template <typename Sizes>
auto ReferenceCases(Sizes sizes) {
  return ::testing::Combine(
      AllIsas(), ::testing::Values(AdamGradType::kF32, AdamGradType::kBF16, AdamGradType::kF16),
      ::testing::Values(AdamCopyType::kNone, AdamCopyType::kBF16, AdamCopyType::kF16), sizes,
      ::testing::Bool());
}

inline std::string CaseName(const ::testing::TestParamInfo<CaseParam>& info) {
  auto [isa, grad_type, copy_type, n, aligned] = info.param;
  return std::string(IsaName(isa)) + "_grad_" + AdamGradTypeName(grad_type) + "_copy_" +
         AdamCopyTypeName(copy_type) + "_n" + std::to_string(n) +
         (aligned ? "_aligned" : "_unaligned");
}

// Names the per-ISA tests' instances.
inline std::string IsaParamName(const ::testing::TestParamInfo<Isa>& info) {
  return std::string(IsaName(info.param));
}

// fp32 bit patterns for the copy's rounding: NaNs, infinities, subnormals, ties, f16 overflow,
// then random patterns from `seed` up to 1000 in all.
inline std::vector<uint32_t> CopyRoundingBits(uint32_t seed) {
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                0xffc00001u, 0x7f800001u, 0xff812345u, 0x00000001u, 0x807fffffu,
                                0x00400000u, 0x7f7fffffu, 0x3f808000u, 0x3f818000u, 0x3f80c000u,
                                0xbf808000u, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0x38800000u,
                                0x387fc000u, 0x33800000u, 0x33000000u, 0x33000001u, 0x7f7f8000u,
                                0x3f7fffffu, 0x4b800000u, 0x3c003000u, 0x3c002000u, 0x3c001000u};
  std::mt19937 rng(seed);
  while (bits.size() < 1000) bits.push_back(static_cast<uint32_t>(rng()));
  return bits;
}

// After a step at lr = 0 from parameters `bits`: each parameter kept (NaNs may be quieted) and
// its copy rounded exactly as kernels/ref/half.h does. Stops at the first failure; callers wrap
// it in ASSERT_NO_FATAL_FAILURE.
inline void ExpectCopyRoundsLikeHalfH(const std::vector<uint32_t>& bits,
                                      const std::vector<float>& p,
                                      const std::vector<uint16_t>& copy, AdamCopyType copy_type) {
  for (size_t i = 0; i < bits.size(); ++i) {
    uint32_t in = bits[i];
    ASSERT_EQ(std::bit_cast<uint32_t>(p[i]) | 0x00400000u * std::isnan(p[i]),
              in | 0x00400000u * std::isnan(std::bit_cast<float>(in)))
        << "lr = 0 changed parameter " << i;
    ASSERT_EQ(copy[i], RoundCopy(copy_type, p[i]))
        << "element " << i << " bits 0x" << std::hex << std::bit_cast<uint32_t>(p[i]);
  }
}

// ForceIsa(kScalar) lowers `isa_of`'s variant, and unforced it picks the best the CPU has
// (unless SLUICE_ISA chose one).
inline void ExpectForceIsaLowersTheVariant(Isa (*isa_of)()) {
  ForceIsa(Isa::kScalar);
  EXPECT_EQ(isa_of(), Isa::kScalar);
  ClearForcedIsa();
  const CpuFeatures& f = DetectCpuFeatures();
  Isa best = f.avx512 ? Isa::kAvx512 : f.avx2 ? Isa::kAvx2 : Isa::kScalar;
  if (std::getenv("SLUICE_ISA") == nullptr) {
    EXPECT_EQ(isa_of(), best);
  }
}

}  // namespace sluice::kernels::optimizer_test
