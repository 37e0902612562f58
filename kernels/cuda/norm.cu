#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/launch_check.h"
#include "kernels/cuda/norm.h"

namespace sluice::kernels::cuda {
namespace {

constexpr int kWarp = 32;
// Row elements a thread keeps in registers. A row longer than kItems * kMaxBlock takes the
// "wide" kernels, which read it again from global memory (L1 / L2) in each pass.
constexpr int kItems = 16;
// 512 threads keep the register cap at 128, enough for the backward's five cached arrays.
constexpr int kMaxBlock = 512;
constexpr int kWarpRowsPerBlock = 8;
// The backward aims at about this many threads in total (row groups x threads per group). A
// constant rather than the device's size, so the split of rows into groups, hence the bits of
// dgamma, is a function of the shape alone.
constexpr int64_t kBackwardThreads = 64 * 1024;
constexpr int64_t kGridCap = int64_t{1} << 20;  // forward rows beyond it go round a stride loop
constexpr int64_t kMaxCols = int64_t{1} << 30;  // keeps column arithmetic in int
constexpr int kFinalCols = 32;
constexpr int kFinalSlices = 8;

using internal::FromFloat;
using internal::kVec;
using internal::Pack;
using internal::ToFloat;

// Elements [c0, c0 + V) of a row as floats; those at or past cols read as 0. vec: the launcher
// found every base 16-byte aligned and cols % V == 0, so the pack is whole and aligned.
template <typename T, int V>
__device__ __forceinline__ void LoadPack(const T* row, int c0, int cols, bool vec, float* out) {
  if (vec) {
    const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(row + c0);
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = ToFloat(p.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = c0 + k < cols ? ToFloat(row[c0 + k]) : 0.0f;
  }
}

template <typename T, int V>
__device__ __forceinline__ void StorePack(T* row, int c0, int cols, bool vec, const float* in) {
  if (vec) {
    Pack<T, V> p;
#pragma unroll
    for (int k = 0; k < V; ++k) p.v[k] = FromFloat<T>(in[k]);
    *reinterpret_cast<Pack<T, V>*>(row + c0) = p;
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (c0 + k < cols) row[c0 + k] = FromFloat<T>(in[k]);
    }
  }
}

// The threads that share a row: one warp (kWarpRows, kWarpRowsPerBlock rows per block) or the
// whole block.
template <bool kWarpRows>
struct RowGroup {
  __device__ static int Rank() { return kWarpRows ? threadIdx.x % kWarp : threadIdx.x; }
  __device__ static int Size() { return kWarpRows ? kWarp : blockDim.x; }
  __device__ static int64_t Index() {
    return kWarpRows ? int64_t{blockIdx.x} * kWarpRowsPerBlock + threadIdx.x / kWarp
                     : int64_t{blockIdx.x};
  }
  __device__ static int64_t Count() {
    return kWarpRows ? int64_t{gridDim.x} * kWarpRowsPerBlock : int64_t{gridDim.x};
  }
};

// Sums each v[j] over the row group; every thread gets the same bits (the butterfly adds the same
// two operands in both lanes of a pair, and the block step adds the warps in index order).
// scratch holds kWarp * N floats; blockDim.x is a multiple of kWarp.
template <bool kWarpRows, int N>
__device__ __forceinline__ void GroupSum(float (&v)[N], float* scratch) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      v[j] += __shfl_xor_sync(0xffffffffu, v[j], offset);
    }
  }
  if constexpr (!kWarpRows) {
    const int warps = blockDim.x / kWarp;
    if (threadIdx.x % kWarp == 0) {
#pragma unroll
      for (int j = 0; j < N; ++j) scratch[j * kWarp + threadIdx.x / kWarp] = v[j];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < N; ++j) {
      float total = 0.0f;
      for (int w = 0; w < warps; ++w) total += scratch[j * kWarp + w];
      v[j] = total;
    }
    __syncthreads();  // the next GroupSum reuses scratch
  }
}

template <typename T>
struct ForwardArgs {
  const T* x = nullptr;  // the rows (unused when kAdd)
  const T* a = nullptr;  // kAdd: the rows are a + b, stored to r first
  const T* b = nullptr;
  T* r = nullptr;
  const T* gamma = nullptr;
  const T* beta = nullptr;  // may be null
  T* y = nullptr;
  float* mean = nullptr;  // LayerNorm only
  float* rstd = nullptr;
  int64_t rows = 0;
  int cols = 0;
  float eps = 0.0f;
  bool vec = false;
};

// Loads pack `pack` of the row at `offset` as the norm sees it: x, or a + b rounded to T (and
// stored to r, so r holds exactly what is normalized).
template <typename T, int V, bool kAdd>
__device__ __forceinline__ void LoadInput(const ForwardArgs<T>& args, int64_t offset, int pack,
                                          float* v) {
  const int c0 = pack * V;
  if constexpr (kAdd) {
    float a[V];
    float b[V];
    LoadPack<T, V>(args.a + offset, c0, args.cols, args.vec, a);
    LoadPack<T, V>(args.b + offset, c0, args.cols, args.vec, b);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = ToFloat(FromFloat<T>(a[k] + b[k]));
    StorePack<T, V>(args.r + offset, c0, args.cols, args.vec, v);
  } else {
    LoadPack<T, V>(args.x + offset, c0, args.cols, args.vec, v);
  }
}

// kCenter: LayerNorm (subtract the mean, add beta), else RMSNorm. The row stays in registers:
// mean, then the variance two-pass from the registers, then y.
template <typename T, bool kWarpRows, bool kCenter, bool kAdd>
__global__ void __launch_bounds__(kMaxBlock) NormForwardKernel(ForwardArgs<T> args) {
  constexpr int V = kVec<T>;
  constexpr int P = kItems / V;
  using Group = RowGroup<kWarpRows>;
  __shared__ float scratch[kWarp];
  const int cols = args.cols;
  const int packs = (cols + V - 1) / V;
  const int rank = Group::Rank();
  const int size = Group::Size();
  const bool has_beta = kCenter && args.beta != nullptr;

  float gamma[P][V];
  float beta[P][V];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int pack = rank + p * size;
#pragma unroll
    for (int k = 0; k < V; ++k) gamma[p][k] = beta[p][k] = 0.0f;
    if (pack < packs) {
      LoadPack<T, V>(args.gamma, pack * V, cols, args.vec, gamma[p]);
      if (has_beta) LoadPack<T, V>(args.beta, pack * V, cols, args.vec, beta[p]);
    }
  }

  for (int64_t row = Group::Index(); row < args.rows; row += Group::Count()) {
    const int64_t offset = row * cols;
    float v[P][V];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int pack = rank + p * size;
      if (pack < packs) {
        LoadInput<T, V, kAdd>(args, offset, pack, v[p]);
      } else {
#pragma unroll
        for (int k = 0; k < V; ++k) v[p][k] = 0.0f;
      }
    }
    float mean = 0.0f;
    if constexpr (kCenter) {
      float sum[1] = {0.0f};
#pragma unroll
      for (int p = 0; p < P; ++p) {
#pragma unroll
        for (int k = 0; k < V; ++k) sum[0] += v[p][k];  // padding reads as 0
      }
      GroupSum<kWarpRows>(sum, scratch);
      mean = sum[0] / static_cast<float>(cols);
    }
    float sq[1] = {0.0f};
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int c0 = (rank + p * size) * V;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (c0 + k < cols) {  // padding would add mean^2
          const float d = v[p][k] - mean;
          sq[0] += d * d;
        }
      }
    }
    GroupSum<kWarpRows>(sq, scratch);
    const float rstd = 1.0f / sqrtf(sq[0] / static_cast<float>(cols) + args.eps);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int pack = rank + p * size;
      if (pack < packs) {
        float out[V];
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float n = (v[p][k] - mean) * rstd * gamma[p][k];
          out[k] = has_beta ? n + beta[p][k] : n;
        }
        StorePack<T, V>(args.y + offset, pack * V, cols, args.vec, out);
      }
    }
    if (rank == 0) {
      if constexpr (kCenter) args.mean[row] = mean;
      args.rstd[row] = rstd;
    }
  }
}

// Rows too long for registers: one block per row, reading the row again for each pass. With kAdd
// the later passes read r, which this same thread wrote in the first pass.
template <typename T, bool kCenter, bool kAdd>
__global__ void __launch_bounds__(kMaxBlock) NormForwardWideKernel(ForwardArgs<T> args) {
  constexpr int V = kVec<T>;
  __shared__ float scratch[kWarp];
  const int cols = args.cols;
  const int packs = (cols + V - 1) / V;
  const bool has_beta = kCenter && args.beta != nullptr;
  for (int64_t row = blockIdx.x; row < args.rows; row += gridDim.x) {
    const int64_t offset = row * cols;
    const T* src = kAdd ? args.r + offset : args.x + offset;
    float sum[1] = {0.0f};  // LayerNorm: sum of x; RMSNorm: sum of x^2
    for (int pack = threadIdx.x; pack < packs; pack += blockDim.x) {
      float v[V];
      LoadInput<T, V, kAdd>(args, offset, pack, v);
#pragma unroll
      for (int k = 0; k < V; ++k) sum[0] += kCenter ? v[k] : v[k] * v[k];  // padding is 0
    }
    GroupSum<false>(sum, scratch);
    float mean = 0.0f;
    float sq[1] = {sum[0]};
    if constexpr (kCenter) {
      mean = sum[0] / static_cast<float>(cols);
      sq[0] = 0.0f;
      for (int pack = threadIdx.x; pack < packs; pack += blockDim.x) {
        float v[V];
        LoadPack<T, V>(src, pack * V, cols, args.vec, v);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          if (pack * V + k < cols) {
            const float d = v[k] - mean;
            sq[0] += d * d;
          }
        }
      }
      GroupSum<false>(sq, scratch);
    }
    const float rstd = 1.0f / sqrtf(sq[0] / static_cast<float>(cols) + args.eps);
    for (int pack = threadIdx.x; pack < packs; pack += blockDim.x) {
      float v[V];
      float gamma[V];
      float beta[V];
      LoadPack<T, V>(src, pack * V, cols, args.vec, v);
      LoadPack<T, V>(args.gamma, pack * V, cols, args.vec, gamma);
      if (has_beta) LoadPack<T, V>(args.beta, pack * V, cols, args.vec, beta);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float n = (v[k] - mean) * rstd * gamma[k];
        v[k] = has_beta ? n + beta[k] : n;
      }
      StorePack<T, V>(args.y + offset, pack * V, cols, args.vec, v);
    }
    if (threadIdx.x == 0) {
      if constexpr (kCenter) args.mean[row] = mean;
      args.rstd[row] = rstd;
    }
  }
}

template <typename T>
struct BackwardArgs {
  const T* x = nullptr;
  const T* gamma = nullptr;
  const float* mean = nullptr;  // LayerNorm only
  const float* rstd = nullptr;
  const T* dy = nullptr;
  T* dx = nullptr;
  float* part_gamma = nullptr;  // [groups, cols]
  float* part_beta = nullptr;   // [groups, cols], or null (RMSNorm, or no dbeta)
  int64_t rows = 0;
  int64_t rows_per_group = 0;
  int64_t groups = 0;
  int cols = 0;
  bool vec = false;
};

// Row group g takes rows [g * rows_per_group, ...) in order, writes dx for each, and keeps its
// share of dgamma / dbeta in registers (a thread owns the same columns in every row), written
// once to the group's partial row at the end.
template <typename T, bool kWarpRows, bool kCenter>
__global__ void __launch_bounds__(kMaxBlock) NormBackwardKernel(BackwardArgs<T> args) {
  constexpr int V = kVec<T>;
  constexpr int P = kItems / V;
  constexpr int kSums = kCenter ? 2 : 1;  // [sum g,] sum g * xhat
  constexpr int kGx = kSums - 1;
  using Group = RowGroup<kWarpRows>;
  __shared__ float scratch[kSums * kWarp];
  const int64_t group = Group::Index();
  // Only whole warps of the last block leave here, and the warp mode has no block barrier.
  if (group >= args.groups) return;
  const int cols = args.cols;
  const int packs = (cols + V - 1) / V;
  const int rank = Group::Rank();
  const int size = Group::Size();

  float gamma[P][V];
  float acc_gamma[P][V];
  float acc_beta[P][V];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int pack = rank + p * size;
#pragma unroll
    for (int k = 0; k < V; ++k) gamma[p][k] = acc_gamma[p][k] = acc_beta[p][k] = 0.0f;
    if (pack < packs) LoadPack<T, V>(args.gamma, pack * V, cols, args.vec, gamma[p]);
  }

  const int64_t first = group * args.rows_per_group;
  const int64_t last = std::min(args.rows, first + args.rows_per_group);
  for (int64_t row = first; row < last; ++row) {
    const int64_t offset = row * cols;
    const float mean = kCenter ? args.mean[row] : 0.0f;
    const float rstd = args.rstd[row];
    float xhat[P][V];
    float g[P][V];
    float sums[kSums];
#pragma unroll
    for (int j = 0; j < kSums; ++j) sums[j] = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int pack = rank + p * size;
      float x[V];
      float dy[V];
#pragma unroll
      for (int k = 0; k < V; ++k) x[k] = dy[k] = 0.0f;
      if (pack < packs) {
        LoadPack<T, V>(args.x + offset, pack * V, cols, args.vec, x);
        LoadPack<T, V>(args.dy + offset, pack * V, cols, args.vec, dy);
      }
      // Padding has dy = 0, so it adds nothing below.
#pragma unroll
      for (int k = 0; k < V; ++k) {
        xhat[p][k] = (x[k] - mean) * rstd;
        g[p][k] = dy[k] * gamma[p][k];
        if constexpr (kCenter) sums[0] += g[p][k];
        sums[kGx] += g[p][k] * xhat[p][k];
        acc_gamma[p][k] += dy[k] * xhat[p][k];
        acc_beta[p][k] += dy[k];
      }
    }
    GroupSum<kWarpRows>(sums, scratch);
    const float mean_g = kCenter ? sums[0] / static_cast<float>(cols) : 0.0f;
    const float mean_gx = sums[kGx] / static_cast<float>(cols);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int pack = rank + p * size;
      if (pack < packs) {
        float out[V];
#pragma unroll
        for (int k = 0; k < V; ++k) out[k] = rstd * (g[p][k] - mean_g - xhat[p][k] * mean_gx);
        StorePack<T, V>(args.dx + offset, pack * V, cols, args.vec, out);
      }
    }
  }

  float* part_gamma = args.part_gamma + group * cols;
  float* part_beta = args.part_beta != nullptr ? args.part_beta + group * cols : nullptr;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int c0 = (rank + p * size) * V;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (c0 + k < cols) {
        part_gamma[c0 + k] = acc_gamma[p][k];
        if (part_beta != nullptr) part_beta[c0 + k] = acc_beta[p][k];
      }
    }
  }
}

// The wide form: the group's partial row in the workspace is the accumulator (each column is
// read and written by the one thread that owns it).
template <typename T, bool kCenter>
__global__ void __launch_bounds__(kMaxBlock) NormBackwardWideKernel(BackwardArgs<T> args) {
  constexpr int V = kVec<T>;
  constexpr int kSums = kCenter ? 2 : 1;
  constexpr int kGx = kSums - 1;
  __shared__ float scratch[kSums * kWarp];
  const int64_t group = blockIdx.x;
  const int cols = args.cols;
  const int packs = (cols + V - 1) / V;
  float* part_gamma = args.part_gamma + group * cols;
  float* part_beta = args.part_beta != nullptr ? args.part_beta + group * cols : nullptr;
  const int64_t first = group * args.rows_per_group;
  const int64_t last = std::min(args.rows, first + args.rows_per_group);
  for (int64_t row = first; row < last; ++row) {
    const int64_t offset = row * cols;
    const float mean = kCenter ? args.mean[row] : 0.0f;
    const float rstd = args.rstd[row];
    float sums[kSums];
#pragma unroll
    for (int j = 0; j < kSums; ++j) sums[j] = 0.0f;
    for (int pack = threadIdx.x; pack < packs; pack += blockDim.x) {
      float x[V];
      float dy[V];
      float gamma[V];
      LoadPack<T, V>(args.x + offset, pack * V, cols, args.vec, x);
      LoadPack<T, V>(args.dy + offset, pack * V, cols, args.vec, dy);
      LoadPack<T, V>(args.gamma, pack * V, cols, args.vec, gamma);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int c = pack * V + k;
        const float xhat = (x[k] - mean) * rstd;
        const float g = dy[k] * gamma[k];
        if constexpr (kCenter) sums[0] += g;
        sums[kGx] += g * xhat;
        if (c < cols) {
          float pg = dy[k] * xhat;
          float pb = dy[k];
          if (row != first) {
            pg = part_gamma[c] + pg;
            if (part_beta != nullptr) pb = part_beta[c] + pb;
          }
          part_gamma[c] = pg;
          if (part_beta != nullptr) part_beta[c] = pb;
        }
      }
    }
    GroupSum<false>(sums, scratch);
    const float mean_g = kCenter ? sums[0] / static_cast<float>(cols) : 0.0f;
    const float mean_gx = sums[kGx] / static_cast<float>(cols);
    for (int pack = threadIdx.x; pack < packs; pack += blockDim.x) {
      float x[V];
      float dy[V];
      float gamma[V];
      LoadPack<T, V>(args.x + offset, pack * V, cols, args.vec, x);
      LoadPack<T, V>(args.dy + offset, pack * V, cols, args.vec, dy);
      LoadPack<T, V>(args.gamma, pack * V, cols, args.vec, gamma);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float xhat = (x[k] - mean) * rstd;
        x[k] = rstd * (dy[k] * gamma[k] - mean_g - xhat * mean_gx);
      }
      StorePack<T, V>(args.dx + offset, pack * V, cols, args.vec, x);
    }
  }
}

// dgamma[c] += sum over groups of part_gamma[group, c] (and dbeta alike), in a fixed order: each
// of kFinalSlices threads sums every kFinalSlices-th group, then one thread adds the slices.
__global__ void __launch_bounds__(kFinalCols* kFinalSlices)
    NormParamFinalizeKernel(const float* part_gamma, const float* part_beta, float* dgamma,
                            float* dbeta, int64_t groups, int cols) {
  __shared__ float slices[2][kFinalSlices][kFinalCols];
  const int c = blockIdx.x * kFinalCols + threadIdx.x;
  float sum_gamma = 0.0f;
  float sum_beta = 0.0f;
  if (c < cols) {
    for (int64_t g = threadIdx.y; g < groups; g += kFinalSlices) {
      sum_gamma += part_gamma[g * cols + c];
      if (part_beta != nullptr) sum_beta += part_beta[g * cols + c];
    }
  }
  slices[0][threadIdx.y][threadIdx.x] = sum_gamma;
  slices[1][threadIdx.y][threadIdx.x] = sum_beta;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total_gamma = 0.0f;
    float total_beta = 0.0f;
#pragma unroll
    for (int s = 0; s < kFinalSlices; ++s) {
      total_gamma += slices[0][s][threadIdx.x];
      total_beta += slices[1][s][threadIdx.x];
    }
    dgamma[c] += total_gamma;
    if (dbeta != nullptr) dbeta[c] += total_beta;
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

// How rows map to threads; a function of T and cols only, so the summation order is too.
struct Plan {
  bool warp_rows;  // one warp per row, kWarpRowsPerBlock rows per block
  bool wide;       // the row does not fit in registers
  int threads;     // per block
};

template <typename T>
Plan PlanFor(int64_t cols) {
  constexpr int64_t V = kVec<T>;
  constexpr int64_t P = kItems / V;
  const int64_t packs = (cols + V - 1) / V;
  if (packs <= kWarp * P) return {true, false, kWarp * kWarpRowsPerBlock};
  if (packs <= kMaxBlock * P) {
    const int64_t needed = (packs + P - 1) / P;
    return {false, false, static_cast<int>((needed + kWarp - 1) / kWarp * kWarp)};
  }
  return {false, true, kMaxBlock};
}

struct BackwardSplit {
  int64_t rows_per_group;
  int64_t groups;
};

BackwardSplit SplitRows(const Plan& plan, int64_t rows) {
  const int64_t group_threads = plan.warp_rows ? kWarp : plan.threads;
  const int64_t max_groups = std::max<int64_t>(1, kBackwardThreads / group_threads);
  const int64_t rows_per_group = (rows + max_groups - 1) / max_groups;
  return {rows_per_group, (rows + rows_per_group - 1) / rows_per_group};
}

template <typename T>
size_t WorkspaceBytesFor(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  const BackwardSplit split = SplitRows(PlanFor<T>(cols), rows);
  return static_cast<size_t>(split.groups) * static_cast<size_t>(cols) * 2 * sizeof(float);
}

template <typename T>
bool CanVectorize(int64_t cols, std::initializer_list<const void*> pointers) {
  if (cols % kVec<T> != 0) return false;
  for (const void* p : pointers) {
    if (p != nullptr && !internal::Aligned(p)) return false;
  }
  return true;
}

unsigned Blocks(int64_t n, int64_t per_block) {
  return static_cast<unsigned>(std::min(kGridCap, (n + per_block - 1) / per_block));
}

template <typename T, bool kCenter, bool kAdd>
LaunchStatus LaunchForward(const ForwardArgs<T>& args, const char* what, cudaStream_t stream) {
  const Plan plan = PlanFor<T>(args.cols);
  if (plan.warp_rows) {
    NormForwardKernel<T, true, kCenter, kAdd>
        <<<Blocks(args.rows, kWarpRowsPerBlock), plan.threads, 0, stream>>>(args);
  } else if (!plan.wide) {
    NormForwardKernel<T, false, kCenter, kAdd>
        <<<Blocks(args.rows, 1), plan.threads, 0, stream>>>(args);
  } else {
    NormForwardWideKernel<T, kCenter, kAdd>
        <<<Blocks(args.rows, 1), plan.threads, 0, stream>>>(args);
  }
  return internal::AfterLaunch(what);
}

template <typename T, bool kCenter>
LaunchStatus LaunchBackward(BackwardArgs<T> args, float* dgamma, float* dbeta, void* workspace,
                            const char* what, cudaStream_t stream) {
  const Plan plan = PlanFor<T>(args.cols);
  const BackwardSplit split = SplitRows(plan, args.rows);
  args.rows_per_group = split.rows_per_group;
  args.groups = split.groups;
  args.part_gamma = static_cast<float*>(workspace);
  args.part_beta = dbeta != nullptr ? args.part_gamma + split.groups * args.cols : nullptr;
  if (plan.warp_rows) {
    const auto blocks =
        static_cast<unsigned>((split.groups + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
    NormBackwardKernel<T, true, kCenter><<<blocks, plan.threads, 0, stream>>>(args);
  } else if (!plan.wide) {
    NormBackwardKernel<T, false, kCenter>
        <<<static_cast<unsigned>(split.groups), plan.threads, 0, stream>>>(args);
  } else {
    NormBackwardWideKernel<T, kCenter>
        <<<static_cast<unsigned>(split.groups), plan.threads, 0, stream>>>(args);
  }
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return internal::FromCuda(error, what);
  const unsigned col_blocks = static_cast<unsigned>((args.cols + kFinalCols - 1) / kFinalCols);
  NormParamFinalizeKernel<<<col_blocks, dim3(kFinalCols, kFinalSlices), 0, stream>>>(
      args.part_gamma, args.part_beta, dgamma, dbeta, split.groups, args.cols);
  return internal::AfterLaunch(what);
}

}  // namespace

#define SLUICE_NORM_CHECK_SHAPE(op, rows, cols)                                   \
  SLUICE_CUDA_LAUNCH_REQUIRE((rows) >= 0 && (cols) >= 0 && (cols) <= kMaxCols,    \
                             op ": rows and cols must be >= 0 and cols <= 2^30"); \
  if ((rows) == 0) return LaunchStatus::Ok();                                     \
  SLUICE_CUDA_LAUNCH_REQUIRE((cols) >= 1, op ": cols must be >= 1 when rows > 0")

size_t NormBackwardWorkspaceBytes(int64_t rows, int64_t cols) {
  return std::max(WorkspaceBytesFor<float>(rows, cols),
                  WorkspaceBytesFor<__nv_bfloat16>(rows, cols));
}

template <typename T>
LaunchStatus LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, float* mean,
                              float* rstd, int64_t rows, int64_t cols, float eps,
                              cudaStream_t stream) {
  SLUICE_NORM_CHECK_SHAPE("LayerNormForward", rows, cols);
  SLUICE_CUDA_LAUNCH_REQUIRE(
      x != nullptr && gamma != nullptr && y != nullptr && mean != nullptr && rstd != nullptr,
      "LayerNormForward: x, gamma, y, mean and rstd must not be null when rows > 0");
  const ForwardArgs<T> args{.x = x,
                            .gamma = gamma,
                            .beta = beta,
                            .y = y,
                            .mean = mean,
                            .rstd = rstd,
                            .rows = rows,
                            .cols = static_cast<int>(cols),
                            .eps = eps,
                            .vec = CanVectorize<T>(cols, {x, gamma, beta, y})};
  return LaunchForward<T, true, false>(args, "LayerNormForward", stream);
}

template <typename T>
LaunchStatus RmsNormForward(const T* x, const T* gamma, T* y, float* rstd, int64_t rows,
                            int64_t cols, float eps, cudaStream_t stream) {
  SLUICE_NORM_CHECK_SHAPE("RmsNormForward", rows, cols);
  SLUICE_CUDA_LAUNCH_REQUIRE(x != nullptr && gamma != nullptr && y != nullptr && rstd != nullptr,
                             "RmsNormForward: x, gamma, y and rstd must not be null when rows > 0");
  const ForwardArgs<T> args{.x = x,
                            .gamma = gamma,
                            .y = y,
                            .rstd = rstd,
                            .rows = rows,
                            .cols = static_cast<int>(cols),
                            .eps = eps,
                            .vec = CanVectorize<T>(cols, {x, gamma, y})};
  return LaunchForward<T, false, false>(args, "RmsNormForward", stream);
}

template <typename T>
LaunchStatus AddLayerNormForward(const T* a, const T* b, T* r, const T* gamma, const T* beta, T* y,
                                 float* mean, float* rstd, int64_t rows, int64_t cols, float eps,
                                 cudaStream_t stream) {
  SLUICE_NORM_CHECK_SHAPE("AddLayerNormForward", rows, cols);
  SLUICE_CUDA_LAUNCH_REQUIRE(a != nullptr && b != nullptr && r != nullptr && gamma != nullptr &&
                                 y != nullptr && mean != nullptr && rstd != nullptr,
                             "AddLayerNormForward: a, b, r, gamma, y, mean and rstd must not be "
                             "null when rows > 0");
  const ForwardArgs<T> args{.a = a,
                            .b = b,
                            .r = r,
                            .gamma = gamma,
                            .beta = beta,
                            .y = y,
                            .mean = mean,
                            .rstd = rstd,
                            .rows = rows,
                            .cols = static_cast<int>(cols),
                            .eps = eps,
                            .vec = CanVectorize<T>(cols, {a, b, r, gamma, beta, y})};
  return LaunchForward<T, true, true>(args, "AddLayerNormForward", stream);
}

template <typename T>
LaunchStatus AddRmsNormForward(const T* a, const T* b, T* r, const T* gamma, T* y, float* rstd,
                               int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  SLUICE_NORM_CHECK_SHAPE("AddRmsNormForward", rows, cols);
  SLUICE_CUDA_LAUNCH_REQUIRE(a != nullptr && b != nullptr && r != nullptr && gamma != nullptr &&
                                 y != nullptr && rstd != nullptr,
                             "AddRmsNormForward: a, b, r, gamma, y and rstd must not be null when "
                             "rows > 0");
  const ForwardArgs<T> args{.a = a,
                            .b = b,
                            .r = r,
                            .gamma = gamma,
                            .y = y,
                            .rstd = rstd,
                            .rows = rows,
                            .cols = static_cast<int>(cols),
                            .eps = eps,
                            .vec = CanVectorize<T>(cols, {a, b, r, gamma, y})};
  return LaunchForward<T, false, true>(args, "AddRmsNormForward", stream);
}

template <typename T>
LaunchStatus LayerNormBackward(const T* x, const T* gamma, const float* mean, const float* rstd,
                               const T* dy, T* dx, float* dgamma, float* dbeta, int64_t rows,
                               int64_t cols, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream) {
  SLUICE_NORM_CHECK_SHAPE("LayerNormBackward", rows, cols);
  SLUICE_CUDA_LAUNCH_REQUIRE(x != nullptr && gamma != nullptr && mean != nullptr &&
                                 rstd != nullptr && dy != nullptr && dx != nullptr &&
                                 dgamma != nullptr,
                             "LayerNormBackward: x, gamma, mean, rstd, dy, dx and dgamma must not "
                             "be null when rows > 0");
  SLUICE_CUDA_LAUNCH_REQUIRE(workspace != nullptr && internal::Aligned(workspace, 4) &&
                                 workspace_bytes >= NormBackwardWorkspaceBytes(rows, cols),
                             "LayerNormBackward: the workspace must be 4-byte aligned and hold "
                             "NormBackwardWorkspaceBytes(rows, cols) bytes");
  BackwardArgs<T> args{};
  args.x = x;
  args.gamma = gamma;
  args.mean = mean;
  args.rstd = rstd;
  args.dy = dy;
  args.dx = dx;
  args.rows = rows;
  args.cols = static_cast<int>(cols);
  args.vec = CanVectorize<T>(cols, {x, gamma, dy, dx});
  return LaunchBackward<T, true>(args, dgamma, dbeta, workspace, "LayerNormBackward", stream);
}

template <typename T>
LaunchStatus RmsNormBackward(const T* x, const T* gamma, const float* rstd, const T* dy, T* dx,
                             float* dgamma, int64_t rows, int64_t cols, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream) {
  SLUICE_NORM_CHECK_SHAPE("RmsNormBackward", rows, cols);
  SLUICE_CUDA_LAUNCH_REQUIRE(x != nullptr && gamma != nullptr && rstd != nullptr && dy != nullptr &&
                                 dx != nullptr && dgamma != nullptr,
                             "RmsNormBackward: x, gamma, rstd, dy, dx and dgamma must not be null "
                             "when rows > 0");
  SLUICE_CUDA_LAUNCH_REQUIRE(workspace != nullptr && internal::Aligned(workspace, 4) &&
                                 workspace_bytes >= NormBackwardWorkspaceBytes(rows, cols),
                             "RmsNormBackward: the workspace must be 4-byte aligned and hold "
                             "NormBackwardWorkspaceBytes(rows, cols) bytes");
  BackwardArgs<T> args{};
  args.x = x;
  args.gamma = gamma;
  args.rstd = rstd;
  args.dy = dy;
  args.dx = dx;
  args.rows = rows;
  args.cols = static_cast<int>(cols);
  args.vec = CanVectorize<T>(cols, {x, gamma, dy, dx});
  return LaunchBackward<T, false>(args, dgamma, nullptr, workspace, "RmsNormBackward", stream);
}

#undef SLUICE_NORM_CHECK_SHAPE

#define SLUICE_INSTANTIATE(T)                                                                      \
  template LaunchStatus LayerNormForward<T>(const T*, const T*, const T*, T*, float*, float*,      \
                                            int64_t, int64_t, float, cudaStream_t);                \
  template LaunchStatus RmsNormForward<T>(const T*, const T*, T*, float*, int64_t, int64_t, float, \
                                          cudaStream_t);                                           \
  template LaunchStatus AddLayerNormForward<T>(const T*, const T*, T*, const T*, const T*, T*,     \
                                               float*, float*, int64_t, int64_t, float,            \
                                               cudaStream_t);                                      \
  template LaunchStatus AddRmsNormForward<T>(const T*, const T*, T*, const T*, T*, float*,         \
                                             int64_t, int64_t, float, cudaStream_t);               \
  template LaunchStatus LayerNormBackward<T>(const T*, const T*, const float*, const float*,       \
                                             const T*, T*, float*, float*, int64_t, int64_t,       \
                                             void*, size_t, cudaStream_t);                         \
  template LaunchStatus RmsNormBackward<T>(const T*, const T*, const float*, const T*, T*, float*, \
                                           int64_t, int64_t, void*, size_t, cudaStream_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(__nv_bfloat16)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::cuda
