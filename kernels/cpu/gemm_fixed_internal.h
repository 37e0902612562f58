// Shared by the GemmFixed driver (gemm_fixed.cpp: checks, packing, blocking, threads) and its
// per-ISA micro-kernels (gemm_fixed_scalar.cpp, gemm_fixed_avx2.cpp, gemm_fixed_avx512.cpp).
#pragma once

#include <cstdint>

namespace sluice::kernels::cpu::internal {

// One ISA's micro-kernel and the packed layouts it reads:
//   ap: a block of op(A) rows, ap[p * block_rows + r] = A(i0 + r, p), p < k, r < rows;
//   bp: a panel of op(B) columns, bp[p * panel_cols + j] = B(p, j0 + j), zero for j >= cols,
//       64-byte aligned (panel_cols floats are a whole number of vectors).
// tile() computes C(i0 + r, j0 + j) for r < rows <= block_rows and j < cols <= panel_cols with
// the numerics of gemm_fixed.h, writing through c (pointing at C(i0, j0)) and ldc.
struct GemmFixedVariant {
  int block_rows;
  int panel_cols;
  void (*tile)(int rows, int cols, int64_t k, const float* ap, const float* bp, float alpha,
               float beta, float* c, int64_t ldc);
};

const GemmFixedVariant& GemmFixedScalarVariant();
const GemmFixedVariant& GemmFixedAvx2Variant();
const GemmFixedVariant& GemmFixedAvx512Variant();

// The epilogue of one element, shared by the scalar variant and the vector variants' partial
// panels. Must be compiled without contraction into FMA (the including files say so).
inline float GemmFixedEpilogue(float sum, float alpha, float beta, const float* c) {
  const float t = alpha * sum;
  if (beta == 0.0f) return t;
  const float scaled = beta * *c;
  return scaled + t;
}

// The vector variants' row dispatch: calls tile_rows.template operator()<rows>() for
// 1 <= rows <= kMaxRows (any other count does nothing), so each tile height runs a micro-kernel
// instantiated for it, its accumulators in registers. A template, so it is compiled in each
// variant's file with that file's ISA flags.
template <int kMaxRows, typename TileRows>
void DispatchTileRows(int rows, const TileRows& tile_rows) {
  if constexpr (kMaxRows > 0) {
    if (rows == kMaxRows) return tile_rows.template operator()<kMaxRows>();
    DispatchTileRows<kMaxRows - 1>(rows, tile_rows);
  }
}

}  // namespace sluice::kernels::cpu::internal
