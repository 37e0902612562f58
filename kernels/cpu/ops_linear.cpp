#include "kernels/cpu/ops_linear.h"

#include <cblas.h>

#include <algorithm>

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
                 float beta) {
  if (rows == 0 || out == 0) return;
  if (in == 0) {  // an empty sum; BLAS would reject the leading dimension 0
    if (beta == 0.0f) std::fill(y, y + rows * out, 0.0f);
    return;
  }
  const char* op = "LinearForward";
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, internal::BlasInt(rows, op),
              internal::BlasInt(out, op), internal::BlasInt(in, op), 1.0f, x,
              internal::BlasInt(in, op), w, internal::BlasInt(in, op), beta, y,
              internal::BlasInt(out, op));
}

}  // namespace

void LinearForward(const float* x, const float* w, const float* b, float* y, int64_t rows,
                   int64_t in, int64_t out, int num_threads) {
  if (b != nullptr) {
    FillRows(
        y, rows, out, [b](int64_t o) { return b[o]; }, num_threads);
  }
  ForwardGemm(x, w, y, rows, in, out, b != nullptr ? 1.0f : 0.0f);
}

void LinearBackward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                    float* db, int64_t rows, int64_t in, int64_t out, int num_threads) {
  const char* op = "LinearBackward";
  const int m = internal::BlasInt(rows, op);
  const int k_in = internal::BlasInt(in, op);
  const int n_out = internal::BlasInt(out, op);
  if (dx != nullptr && rows > 0 && in > 0) {
    if (out == 0) {
      std::fill(dx, dx + rows * in, 0.0f);
    } else {
      // dx [rows, in] = dy [rows, out] · w [out, in]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, k_in, n_out, 1.0f, dy, n_out, w,
                  k_in, 0.0f, dx, k_in);
    }
  }
  if (dw != nullptr && out > 0 && in > 0 && rows > 0) {
    // dw [out, in] += dyᵀ [out, rows] · x [rows, in]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n_out, k_in, m, 1.0f, dy, n_out, x, k_in,
                1.0f, dw, k_in);
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
  ForwardGemm(x, workspace, y, rows, in, out, b != nullptr ? 1.0f : 0.0f);
}

void LinearBackwardBf16Weight(const float* x, const uint16_t* w, const float* dy, float* dx,
                              float* dw, float* db, int64_t rows, int64_t in, int64_t out,
                              float* workspace, int num_threads) {
  if (dx != nullptr) ConvertBf16ToF32(w, workspace, in * out, num_threads);
  LinearBackward(x, dx != nullptr ? workspace : nullptr, dy, dx, dw, db, rows, in, out,
                 num_threads);
}

}  // namespace sluice::kernels::cpu
