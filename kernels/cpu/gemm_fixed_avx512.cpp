// AVX-512 GemmFixed micro-kernel: a tile of up to 12 rows x 32 columns (two 16-lane vectors)
// held in 24 accumulators, one broadcast of A and two loads of the packed B panel per step of k.
// Output columns are lanes, so each lane runs the scalar definition's FMA sequence exactly.
// Contraction is off so the epilogue's multiply and add stay separately rounded, as in
// gemm_fixed_scalar.cpp.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
// GCC 12's AVX-512 headers self-initialize their "undefined" vectors and then warn about them
// (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include "kernels/cpu/gemm_fixed_internal.h"

namespace sluice::kernels::cpu::internal {
namespace {

constexpr int kRows = 12;
constexpr int kLanes = 16;
constexpr int kCols = 2 * kLanes;

__mmask16 LaneMask(int lanes) {
  if (lanes >= kLanes) return 0xffff;
  if (lanes <= 0) return 0;
  return static_cast<__mmask16>((1u << lanes) - 1);
}

template <int kTileRows>
void TileRows(int cols, int64_t k, const float* ap, const float* bp, float alpha, float beta,
              float* c, int64_t ldc) {
  __m512 acc0[kTileRows];
  __m512 acc1[kTileRows];
#pragma GCC unroll 12
  for (int r = 0; r < kTileRows; ++r) {
    acc0[r] = _mm512_setzero_ps();
    acc1[r] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p) {
    const __m512 b0 = _mm512_load_ps(bp + p * kCols);
    const __m512 b1 = _mm512_load_ps(bp + p * kCols + kLanes);
    const float* a = ap + p * kRows;
#pragma GCC unroll 12
    for (int r = 0; r < kTileRows; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r]);
      acc0[r] = _mm512_fmadd_ps(ar, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(ar, b1, acc1[r]);
    }
  }
  const __m512 valpha = _mm512_set1_ps(alpha);
  const __m512 vbeta = _mm512_set1_ps(beta);
  const __mmask16 mask0 = LaneMask(cols);
  const __mmask16 mask1 = LaneMask(cols - kLanes);
#pragma GCC unroll 12
  for (int r = 0; r < kTileRows; ++r) {
    float* c_row = c + r * ldc;
    __m512 t0 = _mm512_mul_ps(valpha, acc0[r]);
    __m512 t1 = _mm512_mul_ps(valpha, acc1[r]);
    if (beta != 0.0f) {
      t0 = _mm512_add_ps(_mm512_mul_ps(vbeta, _mm512_maskz_loadu_ps(mask0, c_row)), t0);
      t1 = _mm512_add_ps(_mm512_mul_ps(vbeta, _mm512_maskz_loadu_ps(mask1, c_row + kLanes)), t1);
    }
    _mm512_mask_storeu_ps(c_row, mask0, t0);
    _mm512_mask_storeu_ps(c_row + kLanes, mask1, t1);
  }
}

void Tile(int rows, int cols, int64_t k, const float* ap, const float* bp, float alpha, float beta,
          float* c, int64_t ldc) {
  DispatchTileRows<kRows>(
      rows, [&]<int kTileRows>() { TileRows<kTileRows>(cols, k, ap, bp, alpha, beta, c, ldc); });
}

}  // namespace

const GemmFixedVariant& GemmFixedAvx512Variant() {
  static constexpr GemmFixedVariant kVariant{kRows, kCols, &Tile};
  return kVariant;
}

}  // namespace sluice::kernels::cpu::internal
