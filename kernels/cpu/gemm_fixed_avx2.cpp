// AVX2 GemmFixed micro-kernel: a tile of up to 6 rows x 16 columns (two 8-lane vectors) held in
// 12 of the 16 YMM registers, one broadcast of A and two loads of the packed B panel per step of
// k. Output columns are lanes, so each lane runs the scalar definition's FMA sequence exactly;
// a partial panel finishes through the scalar epilogue. Contraction is off so the epilogue's
// multiply and add stay separately rounded, as in gemm_fixed_scalar.cpp.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <immintrin.h>

#include "kernels/cpu/gemm_fixed_internal.h"

namespace sluice::kernels::cpu::internal {
namespace {

constexpr int kRows = 6;
constexpr int kLanes = 8;
constexpr int kCols = 2 * kLanes;

template <int kTileRows>
void TileRows(int cols, int64_t k, const float* ap, const float* bp, float alpha, float beta,
              float* c, int64_t ldc) {
  __m256 acc0[kTileRows];
  __m256 acc1[kTileRows];
#pragma GCC unroll 6
  for (int r = 0; r < kTileRows; ++r) {
    acc0[r] = _mm256_setzero_ps();
    acc1[r] = _mm256_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p) {
    const __m256 b0 = _mm256_load_ps(bp + p * kCols);
    const __m256 b1 = _mm256_load_ps(bp + p * kCols + kLanes);
    const float* a = ap + p * kRows;
#pragma GCC unroll 6
    for (int r = 0; r < kTileRows; ++r) {
      const __m256 ar = _mm256_broadcast_ss(a + r);
      acc0[r] = _mm256_fmadd_ps(ar, b0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(ar, b1, acc1[r]);
    }
  }
  if (cols == kCols) {
    const __m256 valpha = _mm256_set1_ps(alpha);
    const __m256 vbeta = _mm256_set1_ps(beta);
#pragma GCC unroll 6
    for (int r = 0; r < kTileRows; ++r) {
      float* c_row = c + r * ldc;
      __m256 t0 = _mm256_mul_ps(valpha, acc0[r]);
      __m256 t1 = _mm256_mul_ps(valpha, acc1[r]);
      if (beta != 0.0f) {
        t0 = _mm256_add_ps(_mm256_mul_ps(vbeta, _mm256_loadu_ps(c_row)), t0);
        t1 = _mm256_add_ps(_mm256_mul_ps(vbeta, _mm256_loadu_ps(c_row + kLanes)), t1);
      }
      _mm256_storeu_ps(c_row, t0);
      _mm256_storeu_ps(c_row + kLanes, t1);
    }
    return;
  }
#pragma GCC unroll 6
  for (int r = 0; r < kTileRows; ++r) {
    alignas(32) float sums[kCols];
    _mm256_store_ps(sums, acc0[r]);
    _mm256_store_ps(sums + kLanes, acc1[r]);
    float* c_row = c + r * ldc;
    for (int j = 0; j < cols; ++j) c_row[j] = GemmFixedEpilogue(sums[j], alpha, beta, c_row + j);
  }
}

void Tile(int rows, int cols, int64_t k, const float* ap, const float* bp, float alpha, float beta,
          float* c, int64_t ldc) {
  DispatchTileRows<kRows>(
      rows, [&]<int kTileRows>() { TileRows<kTileRows>(cols, k, ap, bp, alpha, beta, c, ldc); });
}

}  // namespace

const GemmFixedVariant& GemmFixedAvx2Variant() {
  static constexpr GemmFixedVariant kVariant{kRows, kCols, &Tile};
  return kVariant;
}

}  // namespace sluice::kernels::cpu::internal
