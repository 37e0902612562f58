// The portable GemmFixed variant, for CPUs without AVX2 and as the definition the vector
// variants are tested against. std::fma is exact-rounded on any CPU (glibc uses the FMA
// instruction where there is one, an exact software routine otherwise), so this variant gives
// the same bits as the AVX2 and AVX-512 ones; it is slow (a call per multiply-add without FMA
// hardware), which is acceptable for a fallback.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cmath>

#include "kernels/cpu/gemm_fixed_internal.h"

namespace sluice::kernels::cpu::internal {
namespace {

constexpr int kRows = 4;
constexpr int kCols = 8;

void Tile(int rows, int cols, int64_t k, const float* ap, const float* bp, float alpha, float beta,
          float* c, int64_t ldc) {
  float acc[kRows][kCols] = {};  // +0, the start of every sum
  for (int64_t p = 0; p < k; ++p) {
    const float* b_row = bp + p * kCols;
    for (int r = 0; r < rows; ++r) {
      const float a = ap[p * kRows + r];
      for (int j = 0; j < kCols; ++j) acc[r][j] = std::fma(a, b_row[j], acc[r][j]);
    }
  }
  for (int r = 0; r < rows; ++r) {
    float* c_row = c + r * ldc;
    for (int j = 0; j < cols; ++j) {
      c_row[j] = GemmFixedEpilogue(acc[r][j], alpha, beta, c_row + j);
    }
  }
}

}  // namespace

const GemmFixedVariant& GemmFixedScalarVariant() {
  static constexpr GemmFixedVariant kVariant{kRows, kCols, &Tile};
  return kVariant;
}

}  // namespace sluice::kernels::cpu::internal
