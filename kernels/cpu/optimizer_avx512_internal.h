// The AVX-512 pieces the fused optimizers share (adam_avx512.cpp, lion_avx512.cpp): gradient
// loads in every training dtype and the bf16 / f16 copy of updated parameters, so that every
// optimizer reads and rounds exactly alike. Only *_avx512.cpp files (compiled with the AVX-512
// flags) may include this.
#pragma once

#if !defined(__AVX512F__) || !defined(__AVX512BW__)
#error "optimizer_avx512_internal.h is for files compiled with the AVX-512 flags (*_avx512.cpp)"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ref/adam_ref.h"

namespace sluice::kernels::internal::avx512 {

template <AdamGradType kGrad>
inline __m512 LoadGrad(const void* grads, size_t i) {
  if constexpr (kGrad == AdamGradType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(grads) + i);
  } else {
    __m256i half = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(grads) + i));
    if constexpr (kGrad == AdamGradType::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
    } else {
      return _mm512_cvtph_ps(half);
    }
  }
}

// F32ToBf16 in integer ops, the result in the upper 16 bits of each 32-bit lane. Not
// _mm512_cvtneps_pbh even where AVX512_BF16 exists: per the Intel SDM, VCVTNEPS2BF16 treats
// subnormal inputs as zero, and the copy must equal F32ToBf16 bit for bit.
inline __m512i Bf16High(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb);
  const __m512i quiet = _mm512_or_si512(bits, _mm512_set1_epi32(0x400000));
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_blend_epi32(nan, rounded, quiet);
}

// The upper 16 bits of every lane of `low`, then of `high`: 32 halves in element order, so the
// copy of 32 parameters leaves in one 64-byte store (one permute instead of two narrowing moves).
inline __m512i UpperHalves(__m512i low, __m512i high) {
  alignas(64) static constexpr uint16_t kOddWords[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                                         23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                                         45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  return _mm512_permutex2var_epi16(low, _mm512_load_si512(kOddWords), high);
}

// The copy of 32 parameters (two vectors) as one 64-byte value.
template <AdamCopyType kCopy>
inline __m512i ToCopy(__m512 low, __m512 high) {
  if constexpr (kCopy == AdamCopyType::kF16) {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(low, kRound)),
                              _mm512_cvtps_ph(high, kRound), 1);
  } else {
    return UpperHalves(Bf16High(low), Bf16High(high));
  }
}

}  // namespace sluice::kernels::internal::avx512
