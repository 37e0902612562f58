#include "kernels/cpu/ops_linear.h"

#include <algorithm>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops_convert.h"
#include "kernels/cpu/ops_parallel.h"
#include "kernels/ref/half.h"

namespace sluice::kernels::cpu {
namespace {

// y [rows, out] = bias broadcast over rows (fp32 or bf16 bits), or 0; then the GEMM adds to it.
template <typename Load>
void FillRows(float* y, int64_t rows, int64_t out, Load bias_at, int num_threads) {
  const int threads = internal::OpsThreads(num_threads, rows * out);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) y[r * out + o] = bias_at(o);
  }
}

// y = x·wᵀ + beta * y.
void ForwardGemm(const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out,
                 float beta, int num_threads) {
  Gemm(/*trans_a=*/false, /*trans_b=*/true, rows, out, in, 1.0f, x, in, w, in, beta, y, out,
       num_threads);
}

}  // namespace

void LinearForward(const float* x, const float* w, const float* b, float* y, int64_t rows,
                   int64_t in, int64_t out, int num_threads) {
  if (b != nullptr) {
    FillRows(
        y, rows, out, [b](int64_t o) { return b[o]; }, num_threads);
  }
  ForwardGemm(x, w, y, rows, in, out, b != nullptr ? 1.0f : 0.0f, num_threads);
}

void LinearBackward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                    float* db, int64_t rows, int64_t in, int64_t out, int num_threads) {
  if (dx != nullptr) {
    // dx [rows, in] = dy [rows, out] · w [out, in]; out == 0 gives zeros.
    Gemm(false, false, rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in, num_threads);
  }
  if (dw != nullptr && rows > 0) {  // no rows: nothing to add, dw keeps every bit
    // dw [out, in] += dyᵀ [out, rows] · x [rows, in]
    Gemm(true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw, in, num_threads);
  }
  if (db != nullptr) internal::ColumnSums(dy, db, rows, out, num_threads);
}

void LinearForwardBf16Weight(const float* x, const uint16_t* w, const uint16_t* b, float* y,
                             int64_t rows, int64_t in, int64_t out, float* workspace,
                             int num_threads) {
  ConvertBf16ToF32(w, workspace, in * out, num_threads);
  if (b != nullptr) {
    FillRows(
        y, rows, out, [b](int64_t o) { return Bf16ToF32(b[o]); }, num_threads);
  }
  ForwardGemm(x, workspace, y, rows, in, out, b != nullptr ? 1.0f : 0.0f, num_threads);
}

void LinearBackwardBf16Weight(const float* x, const uint16_t* w, const float* dy, float* dx,
                              float* dw, float* db, int64_t rows, int64_t in, int64_t out,
                              float* workspace, int num_threads) {
  if (dx != nullptr) ConvertBf16ToF32(w, workspace, in * out, num_threads);
  LinearBackward(x, dx != nullptr ? workspace : nullptr, dy, dx, dw, db, rows, in, out,
                 num_threads);
}

}  // namespace sluice::kernels::cpu
