// The elementwise kernels of the linear layer's unfused paths (bias, bias + GELU, used when
// cuBLASLt refuses the fused epilogue) and its deterministic bias gradient.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/launch_check.h"

namespace sluice::kernels::cuda::internal {
namespace {

constexpr unsigned kThreads = 256;
// The bias gradient: a block sums kSumCols adjacent columns (one warp-wide coalesced row read)
// with kSumLanes rows in flight; chunks of about kRowsPerChunk rows give the first pass its
// parallelism, at most kMaxChunks so the second pass stays short.
constexpr int kSumCols = 32;
constexpr int kSumLanes = 8;
constexpr int64_t kRowsPerChunk = 256;
constexpr int64_t kMaxChunks = 64;

using internal::FromFloat;
using internal::ToFloat;

// PyTorch's gelu(approximate="tanh"), as kernels/ref/ops_activation.h; accurate tanhf.
__device__ __forceinline__ float GeluTanh(float v) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
}

template <typename T>
__global__ void AddBiasRowsKernel(T* y, const T* b, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] = FromFloat<T>(ToFloat(y[i]) + ToFloat(b[i % cols]));
  }
}

template <typename T>
__global__ void BiasGeluRowsKernel(T* pre, const T* b, T* y, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float v = ToFloat(pre[i]) + (b != nullptr ? ToFloat(b[i % cols]) : 0.0f);
    pre[i] = FromFloat<T>(v);
    y[i] = FromFloat<T>(GeluTanh(v));
  }
}

// Pass 1: block (blockIdx.x, chunk) sums its kSumCols columns over the chunk's rows, each of the
// kSumLanes lanes a strided subset, then lane 0 adds the lanes in order. With one chunk the sum
// goes straight into db (+=); otherwise into partials[chunk][col].
template <typename T>
__global__ void __launch_bounds__(kSumCols* kSumLanes)
    ColumnSumPartialKernel(const T* dy, int64_t rows, int64_t cols, int64_t rows_per_chunk,
                           float* partials, float* db) {
  __shared__ float lanes[kSumLanes][kSumCols + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kSumCols + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  float sum = 0.0f;
  if (col < cols) {
    for (int64_t r = begin + threadIdx.y; r < end; r += kSumLanes)
      sum += ToFloat(dy[r * cols + col]);
  }
  lanes[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
  float total = lanes[0][threadIdx.x];
  for (int lane = 1; lane < kSumLanes; ++lane) total += lanes[lane][threadIdx.x];
  if (partials == nullptr) {
    db[col] += total;
  } else {
    partials[chunk * cols + col] = total;
  }
}

// Pass 2: db[col] += the chunks' partial sums, added in chunk order.
__global__ void ColumnSumFinishKernel(const float* partials, int64_t chunks, int64_t cols,
                                      float* db) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < cols;
       col += stride) {
    float total = 0.0f;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) total += partials[chunk * cols + col];
    db[col] += total;
  }
}

}  // namespace

template <typename T>
LaunchStatus GemmAddBiasRows(T* y, const T* b, int64_t rows, int64_t cols, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(rows >= 0 && cols >= 0, "GemmAddBiasRows: negative size");
  if (rows == 0 || cols == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(y != nullptr && b != nullptr, "GemmAddBiasRows: null pointer");
  AddBiasRowsKernel<T><<<GridFor(rows * cols, kThreads), kThreads, 0, stream>>>(y, b, rows, cols);
  return AfterLaunch("GemmAddBiasRows");
}

template <typename T>
LaunchStatus GemmBiasGeluRows(T* pre, const T* b, T* y, int64_t rows, int64_t cols,
                              cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(rows >= 0 && cols >= 0, "GemmBiasGeluRows: negative size");
  if (rows == 0 || cols == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(pre != nullptr && y != nullptr, "GemmBiasGeluRows: null pointer");
  BiasGeluRowsKernel<T>
      <<<GridFor(rows * cols, kThreads), kThreads, 0, stream>>>(pre, b, y, rows, cols);
  return AfterLaunch("GemmBiasGeluRows");
}

int64_t GemmColumnSumChunks(int64_t rows, int64_t cols, int64_t max_partial_floats) {
  int64_t chunks = std::min(kMaxChunks, (rows + kRowsPerChunk - 1) / kRowsPerChunk);
  if (chunks > 1 && cols > 0 && chunks * cols > max_partial_floats) {
    chunks = max_partial_floats / cols;
  }
  return std::max<int64_t>(1, chunks);
}

template <typename T>
LaunchStatus GemmColumnSumAccumulate(const T* dy, float* db, int64_t rows, int64_t cols,
                                     int64_t chunks, float* partials, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(rows >= 0 && cols >= 0, "GemmColumnSumAccumulate: negative size");
  if (rows == 0 || cols == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(dy != nullptr && db != nullptr,
                             "GemmColumnSumAccumulate: null pointer");
  SLUICE_CUDA_LAUNCH_REQUIRE(chunks >= 1 && chunks <= 65535,
                             "GemmColumnSumAccumulate: chunks out of range");
  SLUICE_CUDA_LAUNCH_REQUIRE(chunks == 1 || partials != nullptr,
                             "GemmColumnSumAccumulate: no scratch for the partial sums");
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  const dim3 block(kSumCols, kSumLanes);
  const dim3 grid(static_cast<unsigned>((cols + kSumCols - 1) / kSumCols),
                  static_cast<unsigned>(chunks));
  ColumnSumPartialKernel<T><<<grid, block, 0, stream>>>(dy, rows, cols, rows_per_chunk,
                                                        chunks == 1 ? nullptr : partials, db);
  if (chunks > 1) {
    ColumnSumFinishKernel<<<GridFor(cols, kThreads), kThreads, 0, stream>>>(partials, chunks, cols,
                                                                            db);
  }
  return AfterLaunch("GemmColumnSumAccumulate");
}

#define SLUICE_INSTANTIATE(T)                                                                   \
  template LaunchStatus GemmAddBiasRows<T>(T*, const T*, int64_t, int64_t, cudaStream_t);       \
  template LaunchStatus GemmBiasGeluRows<T>(T*, const T*, T*, int64_t, int64_t, cudaStream_t);  \
  template LaunchStatus GemmColumnSumAccumulate<T>(const T*, float*, int64_t, int64_t, int64_t, \
                                                   float*, cudaStream_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(__nv_bfloat16)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::cuda::internal
