#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/launch_check.h"
#include "kernels/cuda/norm.h"

namespace sluice::kernels::cuda {
namespace {

constexpr int kWarp = 32;
// Row elements a thread owns. A row longer than kItems * kMaxBlock takes the "wide" kernels,
// which read it again from global memory (L1 / L2) in each pass.
constexpr int kItems = 16;
// 512 threads keep the register cap at 128, enough for the backward's accumulators and two rows
// of packed inputs.
constexpr int kMaxBlock = 512;
constexpr int kWarpRowsPerBlock = 8;
// Blocks of kMaxBlock threads the register-resident forward must fit per SM, which caps its
// registers. A block has one row (or kWarpRowsPerBlock) and nothing to overlap its loads with but
// other blocks, so the forward wants as many threads resident as it can have without spilling: a
// bf16 RMSNorm fits 32 registers a thread (2048 threads an SM), LayerNorm's second reduction and
// beta take 40 (1536). fp32 rows take twice the registers, and the element-wise loads of
// misaligned rows more: 64 (1024).
template <typename T, bool kCenter, bool kVecIO>
constexpr int ForwardMinBlocks() {
  if (sizeof(T) == 4 || !kVecIO) return 2;
  return kCenter ? 3 : 4;
}
// The backward aims at about this many threads in total (row groups x threads per group). A
// constant rather than the device's size, so the split of rows into groups, hence the bits of
// dgamma, is a function of the shape alone. On an H100 it puts all the groups on the SMs at once
// (4 x 128 or 2 x 256 threads per SM at 2048 / 4096 bf16 columns).
constexpr int64_t kBackwardThreads = 64 * 1024;
constexpr int64_t kGridCap = int64_t{1} << 20;  // forward rows beyond it take further launches
constexpr int64_t kMaxCols = int64_t{1} << 30;  // keeps column arithmetic in int
// The dgamma / dbeta finalize: a block sums kFinalCols columns (one 128-byte line per warp and
// group) over the groups, split into kFinalSlices interleaved slices so that each thread has only
// groups / kFinalSlices loads to make, several at a time.
constexpr int kFinalCols = 32;
constexpr int kFinalSlices = 32;
constexpr int kFinalUnroll = 8;

using internal::kVec;

// A 16-byte pack of a row, kVec<T> elements, held as four 32-bit words: a float each, or two
// bf16 each (the even element in the low half). Rows stay in this form while a kernel holds them,
// 4 registers a pack (a bf16 array would take a register per element); a bf16 is the top half of
// its float, so converting again in each pass is exact and cheap.
struct Raw {
  uint32_t w[4];
};

template <typename T>
constexpr int kPerWord = 4 / static_cast<int>(sizeof(T));

template <typename T>
__device__ __forceinline__ uint32_t BitsOf(T v) {
  if constexpr (sizeof(T) == 4) {
    return __float_as_uint(v);
  } else {
    return __bfloat16_as_ushort(v);
  }
}

// Element k of the pack (k a compile-time constant after unrolling) as a float, exactly.
template <typename T>
__device__ __forceinline__ float Elem(const Raw& p, int k) {
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(p.w[k]);
  } else {
    const uint32_t w = p.w[k / 2];
    return __uint_as_float(k % 2 == 0 ? w << 16 : w & 0xffff0000u);
  }
}

// Element k as T.
template <typename T>
__device__ __forceinline__ T ElemAs(const Raw& p, int k) {
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(p.w[k]);
  } else {
    return __ushort_as_bfloat16(static_cast<unsigned short>(p.w[k / 2] >> (16 * (k % 2))));
  }
}

// kVec<T> floats rounded to T (to nearest even, as FromFloat<T> rounds them), packed.
template <typename T>
__device__ __forceinline__ Raw RoundToRaw(const float* in) {
  Raw p;
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) p.w[i] = __float_as_uint(in[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);  // .x low
      p.w[i] = reinterpret_cast<const uint32_t&>(h);
    }
  }
  return p;
}

constexpr Raw kZeroRaw = {{0u, 0u, 0u, 0u}};  // +0 in either type

// Elements [c0, c0 + kVec<T>) of a row; those at or past cols read as 0. vec: the launcher found
// every base 16-byte aligned and cols % kVec<T> == 0, so the pack is whole and aligned.
template <typename T>
__device__ __forceinline__ Raw LoadRaw(const T* row, int c0, int cols, bool vec) {
  if (vec) {
    const uint4 u = *reinterpret_cast<const uint4*>(row + c0);
    return {{u.x, u.y, u.z, u.w}};
  }
  Raw p = kZeroRaw;
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) {
    if (c0 + k < cols) {
      p.w[k / kPerWord<T>] |= BitsOf(row[c0 + k]) << (32 / kPerWord<T> * (k % kPerWord<T>));
    }
  }
  return p;
}

template <typename T>
__device__ __forceinline__ void LoadFloats(const T* row, int c0, int cols, bool vec, float* out) {
  const Raw p = LoadRaw<T>(row, c0, cols, vec);
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) out[k] = Elem<T>(p, k);
}

template <typename T>
__device__ __forceinline__ void StoreRaw(T* row, int c0, int cols, bool vec, const Raw& p) {
  if (vec) {
    *reinterpret_cast<uint4*>(row + c0) = make_uint4(p.w[0], p.w[1], p.w[2], p.w[3]);
  } else {
#pragma unroll
    for (int k = 0; k < kVec<T>; ++k) {
      if (c0 + k < cols) row[c0 + k] = ElemAs<T>(p, k);
    }
  }
}

template <typename T>
__device__ __forceinline__ void StoreFloats(T* row, int c0, int cols, bool vec, const float* in) {
  StoreRaw<T>(row, c0, cols, vec, RoundToRaw<T>(in));
}

// The per-element arithmetic, with every product written as __fmul_rn or __fmaf_rn, which the
// compiler never fuses or splits. The register-resident kernels are compiled once for 16-byte and
// once for element-wise access and must give the same bits; left to itself, ptxas may fuse a
// multiply into a following add in one of them and not in the other. (Sums and differences of
// other values cannot change that way.)
__device__ __forceinline__ float AddSquare(float acc, float d) { return __fmaf_rn(d, d, acc); }
__device__ __forceinline__ float Xhat(float x, float mean, float rstd) {
  return __fmul_rn(x - mean, rstd);
}
__device__ __forceinline__ float Affine(float xhat, float gamma, float beta, bool has_beta) {
  return has_beta ? __fmaf_rn(xhat, gamma, beta) : __fmul_rn(xhat, gamma);
}
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
__device__ __forceinline__ float InputGrad(float g, float xhat, float rstd, float mean_g,
                                           float mean_gx) {
  return __fmul_rn(rstd, __fmaf_rn(-xhat, mean_gx, g - mean_g));
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
};

// Sums each v[j] over the row group; every thread gets the same bits (the butterfly adds the same
// two operands in both lanes of a pair, and the block step adds the warps in index order).
// The block step goes through scratch[turn], kWarp * N floats, and flips turn: the two buffers
// are used in turn, so a buffer is written again only after every thread has passed the barrier
// of the sum in between, hence read it, and no barrier is needed after the reads. blockDim.x is a
// multiple of kWarp. Every thread of the group must call it (the block step has a barrier).
template <bool kWarpRows, int N>
__device__ __forceinline__ void GroupSum(float (&v)[N], float (&scratch)[2][N * kWarp], int& turn) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      v[j] += __shfl_xor_sync(0xffffffffu, v[j], offset);
    }
  }
  if constexpr (!kWarpRows) {
    float* buffer = scratch[turn];
    turn ^= 1;
    const int warps = blockDim.x / kWarp;
    if (threadIdx.x % kWarp == 0) {
#pragma unroll
      for (int j = 0; j < N; ++j) buffer[j * kWarp + threadIdx.x / kWarp] = v[j];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < N; ++j) {
      float total = 0.0f;
      for (int w = 0; w < warps; ++w) total += buffer[j * kWarp + w];
      v[j] = total;
    }
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
__device__ __forceinline__ Raw LoadInput(const ForwardArgs<T>& args, int64_t offset, int pack,
                                         bool vec) {
  const int c0 = pack * V;
  if constexpr (kAdd) {
    const Raw a = LoadRaw<T>(args.a + offset, c0, args.cols, vec);
    const Raw b = LoadRaw<T>(args.b + offset, c0, args.cols, vec);
    float sum[V];
#pragma unroll
    for (int k = 0; k < V; ++k) sum[k] = Elem<T>(a, k) + Elem<T>(b, k);
    const Raw r = RoundToRaw<T>(sum);
    StoreRaw<T>(args.r + offset, c0, args.cols, vec, r);
    return r;
  } else {
    return LoadRaw<T>(args.x + offset, c0, args.cols, vec);
  }
}

// y for one pack of the row. gamma and beta are read here, at the one place they are used, rather
// than held in registers for the kernel's life: a block usually has a single row, and they are
// the same few KiB for every block, hot in L1 / L2.
template <typename T, int V, bool kCenter>
__device__ __forceinline__ void StoreOutput(const ForwardArgs<T>& args, int64_t offset, int c0,
                                            const Raw& v, float mean, float rstd, bool vec) {
  float gamma[V];
  float beta[V];
  LoadFloats<T>(args.gamma, c0, args.cols, vec, gamma);
  const bool has_beta = kCenter && args.beta != nullptr;
  if (has_beta) LoadFloats<T>(args.beta, c0, args.cols, vec, beta);
  float out[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    out[k] = Affine(Xhat(Elem<T>(v, k), mean, rstd), gamma[k], beta[k], has_beta);
  }
  StoreFloats<T>(args.y + offset, c0, args.cols, vec, out);
}

// kCenter: LayerNorm (subtract the mean, add beta), else RMSNorm. The row stays in registers:
// mean, then the variance two-pass from the registers (exact enough where the mean dwarfs the
// spread, which a one-pass or merged-moments variance is not), then y. One row per row group and
// no row loop (the launcher splits huge row counts over launches): loop-invariant pointers and
// indices would otherwise hold registers for the whole kernel.
template <typename T, bool kWarpRows, bool kCenter, bool kAdd, bool kVecIO>
__global__ void __launch_bounds__(kMaxBlock, ForwardMinBlocks<T, kCenter, kVecIO>())
    NormForwardKernel(ForwardArgs<T> args) {
  constexpr int V = kVec<T>;
  constexpr int P = kItems / V;
  using Group = RowGroup<kWarpRows>;
  __shared__ float scratch[2][kWarp];
  int turn = 0;
  const int64_t row = Group::Index();
  // Block mode: the whole block leaves together. Warp mode: whole warps, and no block barrier.
  if (row >= args.rows) return;
  const int cols = args.cols;
  const int packs = (cols + V - 1) / V;
  const int rank = Group::Rank();
  const int size = Group::Size();
  const int64_t offset = row * cols;

  Raw v[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int pack = rank + p * size;
    v[p] = pack < packs ? LoadInput<T, V, kAdd>(args, offset, pack, kVecIO) : kZeroRaw;
  }
  float mean = 0.0f;
  if constexpr (kCenter) {
    float sum[1] = {0.0f};
#pragma unroll
    for (int p = 0; p < P; ++p) {
#pragma unroll
      for (int k = 0; k < V; ++k) sum[0] += Elem<T>(v[p], k);  // padding: 0
    }
    GroupSum<kWarpRows>(sum, scratch, turn);
    mean = sum[0] / static_cast<float>(cols);
  }
  float sq[1] = {0.0f};
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int c0 = (rank + p * size) * V;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (c0 + k < cols) {  // padding would add mean^2
        sq[0] = AddSquare(sq[0], Elem<T>(v[p], k) - mean);
      }
    }
  }
  GroupSum<kWarpRows>(sq, scratch, turn);
  const float rstd = 1.0f / sqrtf(sq[0] / static_cast<float>(cols) + args.eps);
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int pack = rank + p * size;
    if (pack < packs) {
      StoreOutput<T, V, kCenter>(args, offset, pack * V, v[p], mean, rstd, kVecIO);
    }
  }
  if (rank == 0) {
    if constexpr (kCenter) args.mean[row] = mean;
    args.rstd[row] = rstd;
  }
}

// Rows too long for registers: one block per row, reading the row again for each pass. With kAdd
// the later passes read r, which this same thread wrote in the first pass.
template <typename T, bool kCenter, bool kAdd>
__global__ void __launch_bounds__(kMaxBlock) NormForwardWideKernel(ForwardArgs<T> args) {
  constexpr int V = kVec<T>;
  __shared__ float scratch[2][kWarp];
  int turn = 0;
  const int cols = args.cols;
  const int packs = (cols + V - 1) / V;
  for (int64_t row = blockIdx.x; row < args.rows; row += gridDim.x) {
    const int64_t offset = row * cols;
    const T* src = kAdd ? args.r + offset : args.x + offset;
    float sum[1] = {0.0f};  // LayerNorm: sum of x; RMSNorm: sum of x^2
    for (int pack = threadIdx.x; pack < packs; pack += blockDim.x) {
      const Raw v = LoadInput<T, V, kAdd>(args, offset, pack, args.vec);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float e = Elem<T>(v, k);
        sum[0] = kCenter ? sum[0] + e : AddSquare(sum[0], e);  // padding is 0
      }
    }
    GroupSum<false>(sum, scratch, turn);
    float mean = 0.0f;
    float sq[1] = {sum[0]};
    if constexpr (kCenter) {
      mean = sum[0] / static_cast<float>(cols);
      sq[0] = 0.0f;
      for (int pack = threadIdx.x; pack < packs; pack += blockDim.x) {
        float v[V];
        LoadFloats<T>(src, pack * V, cols, args.vec, v);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          if (pack * V + k < cols) sq[0] = AddSquare(sq[0], v[k] - mean);
        }
      }
      GroupSum<false>(sq, scratch, turn);
    }
    const float rstd = 1.0f / sqrtf(sq[0] / static_cast<float>(cols) + args.eps);
    for (int pack = threadIdx.x; pack < packs; pack += blockDim.x) {
      const Raw v = LoadRaw<T>(src, pack * V, cols, args.vec);
      StoreOutput<T, V, kCenter>(args, offset, pack * V, v, mean, rstd, args.vec);
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

// Lets the finalize kernel, launched as a programmatic dependent, get onto the SMs while this
// grid finishes; it waits for the whole grid (and its stores) before it reads the partials.
__device__ __forceinline__ void LetFinalizeLaunch() {
  asm volatile("griddepcontrol.launch_dependents;");
}

// A thread's share of one row, as loaded: P packs of x and of dy, and the row's statistics.
template <int P>
struct BackwardRow {
  Raw x[P];
  Raw dy[P];
  float mean;  // 0 for RMSNorm
  float rstd;
};

template <typename T, int V, int P, bool kCenter, bool kVecIO>
__device__ __forceinline__ void LoadBackwardRow(const BackwardArgs<T>& args, int64_t row, int rank,
                                                int size, int packs, BackwardRow<P>& out) {
  const int64_t offset = row * args.cols;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int pack = rank + p * size;
    if (pack < packs) {
      out.x[p] = LoadRaw<T>(args.x + offset, pack * V, args.cols, kVecIO);
      out.dy[p] = LoadRaw<T>(args.dy + offset, pack * V, args.cols, kVecIO);
    } else {  // padding: dy = 0 adds nothing to the sums or the accumulators
      out.x[p] = out.dy[p] = kZeroRaw;
    }
  }
  out.mean = kCenter ? args.mean[row] : 0.0f;
  out.rstd = args.rstd[row];
}

// Whether the backward loads the next row while it works on this one: 16 more registers for a
// bf16 row, 32 for an fp32 row, which the 128-register cap cannot spare next to the fp32 row and
// accumulators.
template <typename T>
constexpr bool kPrefetchRow = sizeof(T) == 2;

// Row group g takes rows [g * rows_per_group, ...) in order, writes dx for each, and keeps its
// share of dgamma / dbeta in registers (a thread owns the same columns in every row), written
// once to the group's partial row at the end. The rows are software-pipelined: the next row's x
// and dy are loaded before this row's reduction, so they are in flight through its barrier and
// its dx stores; rows are held as packed T and xhat, g recomputed where needed.
template <typename T, bool kWarpRows, bool kCenter, bool kVecIO>
__global__ void __launch_bounds__(kMaxBlock) NormBackwardKernel(BackwardArgs<T> args) {
  constexpr int V = kVec<T>;
  constexpr int P = kItems / V;
  constexpr int kSums = kCenter ? 2 : 1;  // [sum g,] sum g * xhat
  constexpr int kGx = kSums - 1;
  using Group = RowGroup<kWarpRows>;
  using Row = BackwardRow<P>;
  __shared__ float scratch[2][kSums * kWarp];
  int turn = 0;
  const int64_t group = Group::Index();
  // Only whole warps of the last block leave here, and the warp mode has no block barrier.
  if (group >= args.groups) return;
  const int cols = args.cols;
  const int packs = (cols + V - 1) / V;
  const int rank = Group::Rank();
  const int size = Group::Size();
  const int64_t first = group * args.rows_per_group;
  const int64_t last = std::min(args.rows, first + args.rows_per_group);  // > first

  Row cur;
  LoadBackwardRow<T, V, P, kCenter, kVecIO>(args, first, rank, size, packs, cur);
  Raw gamma[P];
  float acc_gamma[P][V];
  float acc_beta[P][V];  // LayerNorm only; dead code for RMSNorm
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int pack = rank + p * size;
    gamma[p] = pack < packs ? LoadRaw<T>(args.gamma, pack * V, cols, kVecIO) : kZeroRaw;
#pragma unroll
    for (int k = 0; k < V; ++k) acc_gamma[p][k] = acc_beta[p][k] = 0.0f;
  }

  for (int64_t row = first; row < last; ++row) {
    const bool more = row + 1 < last;  // the same for the whole group
    Row next;
    if (kPrefetchRow<T> && more) {
      LoadBackwardRow<T, V, P, kCenter, kVecIO>(args, row + 1, rank, size, packs, next);
    }

    float sums[kSums];
#pragma unroll
    for (int j = 0; j < kSums; ++j) sums[j] = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float dy = Elem<T>(cur.dy[p], k);
        const float xhat = Xhat(Elem<T>(cur.x[p], k), cur.mean, cur.rstd);
        const float g = __fmul_rn(dy, Elem<T>(gamma[p], k));
        if constexpr (kCenter) sums[0] += g;
        sums[kGx] = __fmaf_rn(g, xhat, sums[kGx]);
        acc_gamma[p][k] = __fmaf_rn(dy, xhat, acc_gamma[p][k]);
        if constexpr (kCenter) acc_beta[p][k] += dy;
      }
    }
    GroupSum<kWarpRows>(sums, scratch, turn);
    const float mean_g = kCenter ? sums[0] / static_cast<float>(cols) : 0.0f;
    const float mean_gx = sums[kGx] / static_cast<float>(cols);
    const int64_t offset = row * cols;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int pack = rank + p * size;
      if (pack < packs) {
        float out[V];
#pragma unroll
        for (int k = 0; k < V; ++k) {  // xhat and g exactly as above
          const float xhat = Xhat(Elem<T>(cur.x[p], k), cur.mean, cur.rstd);
          const float g = __fmul_rn(Elem<T>(cur.dy[p], k), Elem<T>(gamma[p], k));
          out[k] = InputGrad(g, xhat, cur.rstd, mean_g, mean_gx);
        }
        StoreFloats<T>(args.dx + offset, pack * V, cols, kVecIO, out);
      }
    }
    if (more) {
      if constexpr (kPrefetchRow<T>) {
        cur = next;
      } else {
        LoadBackwardRow<T, V, P, kCenter, kVecIO>(args, row + 1, rank, size, packs, cur);
      }
    }
  }

  LetFinalizeLaunch();
  float* part_gamma = args.part_gamma + group * cols;
  float* part_beta = kCenter && args.part_beta != nullptr ? args.part_beta + group * cols : nullptr;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int c0 = (rank + p * size) * V;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (c0 + k < cols) {
        part_gamma[c0 + k] = acc_gamma[p][k];
        if (kCenter && part_beta != nullptr) part_beta[c0 + k] = acc_beta[p][k];
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
  __shared__ float scratch[2][kSums * kWarp];
  int turn = 0;
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
      LoadFloats<T>(args.x + offset, pack * V, cols, args.vec, x);
      LoadFloats<T>(args.dy + offset, pack * V, cols, args.vec, dy);
      LoadFloats<T>(args.gamma, pack * V, cols, args.vec, gamma);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int c = pack * V + k;
        const float xhat = Xhat(x[k], mean, rstd);
        const float g = __fmul_rn(dy[k], gamma[k]);
        if constexpr (kCenter) sums[0] += g;
        sums[kGx] = __fmaf_rn(g, xhat, sums[kGx]);
        if (c < cols) {
          float pg = __fmul_rn(dy[k], xhat);
          float pb = dy[k];
          if (row != first) {
            pg = __fmaf_rn(dy[k], xhat, part_gamma[c]);
            if (part_beta != nullptr) pb = part_beta[c] + pb;
          }
          part_gamma[c] = pg;
          if (part_beta != nullptr) part_beta[c] = pb;
        }
      }
    }
    GroupSum<false>(sums, scratch, turn);
    const float mean_g = kCenter ? sums[0] / static_cast<float>(cols) : 0.0f;
    const float mean_gx = sums[kGx] / static_cast<float>(cols);
    for (int pack = threadIdx.x; pack < packs; pack += blockDim.x) {
      float x[V];
      float dy[V];
      float gamma[V];
      LoadFloats<T>(args.x + offset, pack * V, cols, args.vec, x);
      LoadFloats<T>(args.dy + offset, pack * V, cols, args.vec, dy);
      LoadFloats<T>(args.gamma, pack * V, cols, args.vec, gamma);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        x[k] = InputGrad(__fmul_rn(dy[k], gamma[k]), Xhat(x[k], mean, rstd), rstd, mean_g, mean_gx);
      }
      StoreFloats<T>(args.dx + offset, pack * V, cols, args.vec, x);
    }
  }
  LetFinalizeLaunch();
}

// The sums over groups g = first, first + step, ... < count of part_gamma[g * stride] and (kBeta)
// part_beta[g * stride], each in that order. The loads do not depend on the sums, so the unrolled
// loop has kFinalUnroll of each in flight.
template <bool kBeta>
__device__ __forceinline__ void SliceSums(const float* part_gamma, const float* part_beta,
                                          int64_t first, int64_t step, int64_t count,
                                          int64_t stride, float& sum_gamma, float& sum_beta) {
  const int64_t start = first * stride;
  const int64_t jump = step * stride;
  int64_t at = start;
#pragma unroll kFinalUnroll
  for (int64_t g = first; g < count; g += step, at += jump) {
    sum_gamma += part_gamma[at];
    if constexpr (kBeta) sum_beta += part_beta[at];
  }
}

// dgamma[c] += sum over groups of part_gamma[group, c] (and dbeta alike), in a fixed order: each
// of kFinalSlices threads sums every kFinalSlices-th group, then one thread adds the slices.
// Launched as a programmatic dependent of the backward kernel: it waits for that grid before it
// reads anything.
__global__ void __launch_bounds__(kFinalCols* kFinalSlices)
    NormParamFinalizeKernel(const float* part_gamma, const float* part_beta, float* dgamma,
                            float* dbeta, int64_t groups, int cols) {
  __shared__ float slices[2][kFinalSlices][kFinalCols];
  const int c = blockIdx.x * kFinalCols + threadIdx.x;
  asm volatile("griddepcontrol.wait;" ::: "memory");
  float sum_gamma = 0.0f;
  float sum_beta = 0.0f;
  if (c < cols) {
    if (part_beta != nullptr) {
      SliceSums<true>(part_gamma + c, part_beta + c, threadIdx.y, kFinalSlices, groups, cols,
                      sum_gamma, sum_beta);
    } else {
      SliceSums<false>(part_gamma + c, nullptr, threadIdx.y, kFinalSlices, groups, cols, sum_gamma,
                       sum_beta);
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

// args with its rows starting at `first` and `count` of them.
template <typename T>
ForwardArgs<T> RowSlice(ForwardArgs<T> args, int64_t first, int64_t count) {
  const int64_t offset = first * args.cols;
  const auto shift = [offset](auto* p) { return p != nullptr ? p + offset : p; };
  args.x = shift(args.x);
  args.a = shift(args.a);
  args.b = shift(args.b);
  args.r = shift(args.r);
  args.y = shift(args.y);
  if (args.mean != nullptr) args.mean += first;
  args.rstd += first;
  args.rows = count;
  return args;
}

// The argument checks that start every launcher, `what` naming it in the messages: the shape,
// then (when rows > 0) whether the pointers the launcher lists in `required` are set. The
// launcher returns the result when it is an error or rows == 0 (nothing to launch).
LaunchStatus CheckArgs(const char* what, int64_t rows, int64_t cols, bool pointers_set,
                       const char* required) {
  // The messages are built only for a failed check.
  SLUICE_CUDA_LAUNCH_REQUIRE(rows >= 0 && cols >= 0 && cols <= kMaxCols,
                             std::string(what) + ": rows and cols must be >= 0 and cols <= 2^30");
  if (rows == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(cols >= 1, std::string(what) + ": cols must be >= 1 when rows > 0");
  SLUICE_CUDA_LAUNCH_REQUIRE(
      pointers_set, std::string(what) + ": " + required + " must not be null when rows > 0");
  return LaunchStatus::Ok();
}

// The four forward launchers: args holds their pointers and eps. Checks the arguments (x, or a,
// b and r when kAdd; gamma, y, rstd, and mean when kCenter, must be set), then launches.
template <typename T, bool kCenter, bool kAdd>
LaunchStatus LaunchForward(ForwardArgs<T> args, int64_t rows, int64_t cols, const char* what,
                           const char* required, cudaStream_t stream) {
  const bool rows_set =
      kAdd ? args.a != nullptr && args.b != nullptr && args.r != nullptr : args.x != nullptr;
  const bool pointers_set = rows_set && args.gamma != nullptr && args.y != nullptr &&
                            (!kCenter || args.mean != nullptr) && args.rstd != nullptr;
  if (LaunchStatus status = CheckArgs(what, rows, cols, pointers_set, required);
      !status.ok() || rows == 0) {
    return status;
  }
  args.rows = rows;
  args.cols = static_cast<int>(cols);
  // x is null when kAdd, a, b and r are when not, beta may be: CanVectorize skips null pointers.
  args.vec = CanVectorize<T>(cols, {args.x, args.a, args.b, args.r, args.gamma, args.beta, args.y});
  const Plan plan = PlanFor<T>(args.cols);
  if (plan.wide) {
    NormForwardWideKernel<T, kCenter, kAdd>
        <<<Blocks(args.rows, 1), plan.threads, 0, stream>>>(args);
    return internal::AfterLaunch(what);
  }
  // The register-resident kernel has one row per row group: kGridCap blocks' worth of rows per
  // launch (a million or more, so nearly always one launch).
  const int64_t rows_per_block = plan.warp_rows ? kWarpRowsPerBlock : 1;
  const int64_t rows_per_launch = kGridCap * rows_per_block;
  for (int64_t first = 0; first < args.rows; first += rows_per_launch) {
    const ForwardArgs<T> slice =
        RowSlice(args, first, std::min(rows_per_launch, args.rows - first));
    const unsigned blocks = Blocks(slice.rows, rows_per_block);
    if (plan.warp_rows) {
      if (args.vec) {
        NormForwardKernel<T, true, kCenter, kAdd, true><<<blocks, plan.threads, 0, stream>>>(slice);
      } else {
        NormForwardKernel<T, true, kCenter, kAdd, false>
            <<<blocks, plan.threads, 0, stream>>>(slice);
      }
    } else {
      if (args.vec) {
        NormForwardKernel<T, false, kCenter, kAdd, true>
            <<<blocks, plan.threads, 0, stream>>>(slice);
      } else {
        NormForwardKernel<T, false, kCenter, kAdd, false>
            <<<blocks, plan.threads, 0, stream>>>(slice);
      }
    }
    if (first + rows_per_launch < args.rows) {  // the last launch is checked below
      const cudaError_t error = cudaGetLastError();
      if (error != cudaSuccess) return internal::FromCuda(error, what);
    }
  }
  return internal::AfterLaunch(what);
}

// Both backward launchers: args holds their pointers (mean only when kCenter), dbeta may be null.
// Checks the arguments (x, gamma, rstd, dy, dx, dgamma, and mean when kCenter, must be set; the
// workspace large enough), then launches the backward kernel and the dgamma / dbeta finalize.
template <typename T, bool kCenter>
LaunchStatus LaunchBackward(BackwardArgs<T> args, float* dgamma, float* dbeta, int64_t rows,
                            int64_t cols, void* workspace, size_t workspace_bytes, const char* what,
                            const char* required, cudaStream_t stream) {
  const bool pointers_set = args.x != nullptr && args.gamma != nullptr &&
                            (!kCenter || args.mean != nullptr) && args.rstd != nullptr &&
                            args.dy != nullptr && args.dx != nullptr && dgamma != nullptr;
  if (LaunchStatus status = CheckArgs(what, rows, cols, pointers_set, required);
      !status.ok() || rows == 0) {
    return status;
  }
  SLUICE_CUDA_LAUNCH_REQUIRE(workspace != nullptr && internal::Aligned(workspace, 4) &&
                                 workspace_bytes >= NormBackwardWorkspaceBytes(rows, cols),
                             std::string(what) +
                                 ": the workspace must be 4-byte aligned and hold "
                                 "NormBackwardWorkspaceBytes(rows, cols) bytes");
  args.rows = rows;
  args.cols = static_cast<int>(cols);
  args.vec = CanVectorize<T>(cols, {args.x, args.gamma, args.dy, args.dx});
  const Plan plan = PlanFor<T>(args.cols);
  const BackwardSplit split = SplitRows(plan, args.rows);
  args.rows_per_group = split.rows_per_group;
  args.groups = split.groups;
  args.part_gamma = static_cast<float*>(workspace);
  args.part_beta = dbeta != nullptr ? args.part_gamma + split.groups * args.cols : nullptr;
  if (plan.warp_rows) {
    const auto blocks =
        static_cast<unsigned>((split.groups + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
    if (args.vec) {
      NormBackwardKernel<T, true, kCenter, true><<<blocks, plan.threads, 0, stream>>>(args);
    } else {
      NormBackwardKernel<T, true, kCenter, false><<<blocks, plan.threads, 0, stream>>>(args);
    }
  } else if (!plan.wide) {
    const auto blocks = static_cast<unsigned>(split.groups);
    if (args.vec) {
      NormBackwardKernel<T, false, kCenter, true><<<blocks, plan.threads, 0, stream>>>(args);
    } else {
      NormBackwardKernel<T, false, kCenter, false><<<blocks, plan.threads, 0, stream>>>(args);
    }
  } else {
    NormBackwardWideKernel<T, kCenter>
        <<<static_cast<unsigned>(split.groups), plan.threads, 0, stream>>>(args);
  }
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return internal::FromCuda(error, what);
  // A programmatic dependent launch: the finalize's launch overlaps the end of the backward
  // kernel, which lets it start (griddepcontrol.launch_dependents) once its rows are done; the
  // finalize waits for the whole grid and its stores before it reads the partials.
  internal::DependentLaunch launch(
      dim3(static_cast<unsigned>((args.cols + kFinalCols - 1) / kFinalCols)),
      dim3(kFinalCols, kFinalSlices), stream);
  const float* part_gamma = args.part_gamma;
  const float* part_beta = args.part_beta;
  const cudaError_t finalize =
      cudaLaunchKernelEx(&launch.config, NormParamFinalizeKernel, part_gamma, part_beta, dgamma, dbeta,
                         split.groups, args.cols);
  if (finalize != cudaSuccess) return internal::FromCuda(finalize, what);
  return internal::AfterLaunch(what);
}

}  // namespace

size_t NormBackwardWorkspaceBytes(int64_t rows, int64_t cols) {
  return std::max(WorkspaceBytesFor<float>(rows, cols),
                  WorkspaceBytesFor<__nv_bfloat16>(rows, cols));
}

template <typename T>
LaunchStatus LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, float* mean,
                              float* rstd, int64_t rows, int64_t cols, float eps,
                              cudaStream_t stream) {
  return LaunchForward<T, true, false>(
      {.x = x, .gamma = gamma, .beta = beta, .y = y, .mean = mean, .rstd = rstd, .eps = eps}, rows,
      cols, "LayerNormForward", "x, gamma, y, mean and rstd", stream);
}

template <typename T>
LaunchStatus RmsNormForward(const T* x, const T* gamma, T* y, float* rstd, int64_t rows,
                            int64_t cols, float eps, cudaStream_t stream) {
  return LaunchForward<T, false, false>({.x = x, .gamma = gamma, .y = y, .rstd = rstd, .eps = eps},
                                        rows, cols, "RmsNormForward", "x, gamma, y and rstd",
                                        stream);
}

template <typename T>
LaunchStatus AddLayerNormForward(const T* a, const T* b, T* r, const T* gamma, const T* beta, T* y,
                                 float* mean, float* rstd, int64_t rows, int64_t cols, float eps,
                                 cudaStream_t stream) {
  return LaunchForward<T, true, true>({.a = a,
                                       .b = b,
                                       .r = r,
                                       .gamma = gamma,
                                       .beta = beta,
                                       .y = y,
                                       .mean = mean,
                                       .rstd = rstd,
                                       .eps = eps},
                                      rows, cols, "AddLayerNormForward",
                                      "a, b, r, gamma, y, mean and rstd", stream);
}

template <typename T>
LaunchStatus AddRmsNormForward(const T* a, const T* b, T* r, const T* gamma, T* y, float* rstd,
                               int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  return LaunchForward<T, false, true>(
      {.a = a, .b = b, .r = r, .gamma = gamma, .y = y, .rstd = rstd, .eps = eps}, rows, cols,
      "AddRmsNormForward", "a, b, r, gamma, y and rstd", stream);
}

template <typename T>
LaunchStatus LayerNormBackward(const T* x, const T* gamma, const float* mean, const float* rstd,
                               const T* dy, T* dx, float* dgamma, float* dbeta, int64_t rows,
                               int64_t cols, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream) {
  return LaunchBackward<T, true>(
      {.x = x, .gamma = gamma, .mean = mean, .rstd = rstd, .dy = dy, .dx = dx}, dgamma, dbeta, rows,
      cols, workspace, workspace_bytes, "LayerNormBackward",
      "x, gamma, mean, rstd, dy, dx and dgamma", stream);
}

template <typename T>
LaunchStatus RmsNormBackward(const T* x, const T* gamma, const float* rstd, const T* dy, T* dx,
                             float* dgamma, int64_t rows, int64_t cols, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream) {
  return LaunchBackward<T, false>({.x = x, .gamma = gamma, .rstd = rstd, .dy = dy, .dx = dx},
                                  dgamma, nullptr, rows, cols, workspace, workspace_bytes,
                                  "RmsNormBackward", "x, gamma, rstd, dy, dx and dgamma", stream);
}

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
