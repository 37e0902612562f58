// The AVX2 pieces the fused optimizers share (adam_avx2.cpp, lion_avx2.cpp): gradient loads in
// every training dtype and the bf16 / f16 copy of updated parameters, so that every optimizer
// reads and rounds exactly alike. Only *_avx2.cpp files (compiled with -mavx2 -mfma -mf16c) may
// include this.
#pragma once

#if !defined(__AVX2__) || !defined(__F16C__)
#error "optimizer_avx2_internal.h is for files compiled with -mavx2 -mf16c (*_avx2.cpp)"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ref/adam_ref.h"

namespace sluice::kernels::internal::avx2 {

template <AdamGradType kGrad>
inline __m256 LoadGrad(const void* grads, size_t i) {
  if constexpr (kGrad == AdamGradType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(grads) + i);
  } else {
    __m128i half =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(grads) + i));
    if constexpr (kGrad == AdamGradType::kBF16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
    } else {
      return _mm256_cvtph_ps(half);
    }
  }
}

// Two vectors of 32-bit lanes holding values <= 0xffff, narrowed to 16 ordered 16-bit lanes.
inline __m256i Narrow(__m256i low, __m256i high) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(low, high), 0xd8);
}

// F32ToBf16 in integer ops (AVX2 has no bf16 conversion), one result per 32-bit lane: round half
// to even by adding 0x7fff + lsb; NaN kept quiet with its sign and top payload.
inline __m256i Bf16Lanes(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i top = _mm256_srli_epi32(bits, 16);
  const __m256i lsb = _mm256_and_si256(top, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(top, _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

// The copy of 16 parameters (two vectors) as one 32-byte store.
template <AdamCopyType kCopy>
inline __m256i ToCopy(__m256 low, __m256 high) {
  if constexpr (kCopy == AdamCopyType::kF16) {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return _mm256_set_m128i(_mm256_cvtps_ph(high, kRound), _mm256_cvtps_ph(low, kRound));
  } else {
    return Narrow(Bf16Lanes(low), Bf16Lanes(high));
  }
}

}  // namespace sluice::kernels::internal::avx2
