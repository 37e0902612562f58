// The SIMT attention kernels: fp32 math on CUDA cores for every supported head_dim and both
// dtypes (the fallback of the tensor-core kernels, and the float path).
//
// Every block is 256 threads over a 64 x 64 tile of scores: thread (ty, tx) = (tid / 16,
// tid % 16) owns rows ty + 16 i and columns tx + 16 j (i, j < 4), so a row's 16 owners are one
// half-warp and its reductions are shuffles. Tiles live in shared memory as fp32, kD columns wide
// plus one so that reading a column of 16 rows hits 16 banks. kD is the head_dim rounded up to
// one of the compiled widths (32, 64, 80, 96, 128): columns past the real head_dim load as zeros,
// which leave every dot product as it is, and are never stored.
#include <cmath>
#include <string>

#include "kernels/cuda/attention_internal.h"
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/launch_check.h"

namespace sluice::kernels::cuda::internal {
namespace {

using Bf16 = __nv_bfloat16;

constexpr int kTile = kAttentionTile;  // 64 rows (queries or keys) per tile
constexpr int kThreads = 256;
constexpr int kScoreStride = kTile + 16;  // P and dS tiles: the two rows of a warp 16 banks apart

template <int kD>
constexpr int TileFloats() {
  return kTile * (kD + 1);
}

using internal::FromFloat;
using internal::ToFloat;

// Rows [row0, row0 + 64) of one head (rows token_stride elements apart, head_dim of them read)
// into a padded fp32 tile; rows at or past seq and columns at or past head_dim read as 0, so that
// the products of the masked tails stay finite and the padding adds nothing.
template <typename T, int kD>
__device__ __forceinline__ void LoadTile(float* tile, const T* head, int64_t token_stride, int row0,
                                         int seq, int head_dim) {
  for (int idx = threadIdx.x; idx < kTile * kD; idx += kThreads) {
    const int r = idx / kD;
    const int d = idx % kD;
    const int row = row0 + r;
    tile[r * (kD + 1) + d] =
        row < seq && (kD == head_dim || d < head_dim) ? ToFloat(head[row * token_stride + d]) : 0.f;
  }
}

// acc[i][j] = sum_d a[ty + 16 i][d] * b[tx + 16 j][d] over two padded tiles.
template <int kD>
__device__ __forceinline__ void TileDot(const float* a, const float* b, int ty, int tx,
                                        float (&acc)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  }
#pragma unroll 4
  for (int d = 0; d < kD; ++d) {
    float av[4];
    float bv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) av[i] = a[(ty + 16 * i) * (kD + 1) + d];
#pragma unroll
    for (int j = 0; j < 4; ++j) bv[j] = b[(tx + 16 * j) * (kD + 1) + d];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  }
}

// Sum or max over the 16 threads of a half-warp that share a row.
__device__ __forceinline__ float RowMax(float x) {
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}
__device__ __forceinline__ float RowSum(float x) {
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// One block per (query tile, q head, batch); query tiles in reverse so the longest (last) rows
// start first.
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads)
    ForwardKernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                  T* __restrict__ out, float* __restrict__ lse, AttentionShape shape) {
  constexpr int kCols = kD / 16;  // output columns per thread
  extern __shared__ float smem[];
  float* sq = smem;
  float* sk = sq + TileFloats<kD>();
  float* sv = sk + TileFloats<kD>();
  float* sp = sv + TileFloats<kD>();  // [kTile][kScoreStride]

  const int seq = shape.seq;
  const auto [qt, h, b, kvh] = DecodeQueryTileBlock(shape);
  const int64_t q_stride = static_cast<int64_t>(shape.q_heads) * shape.head_dim;
  const int64_t kv_stride = static_cast<int64_t>(shape.kv_heads) * shape.head_dim;
  const T* q_head =
      q + static_cast<int64_t>(b) * seq * q_stride + static_cast<int64_t>(h) * shape.head_dim;
  const T* k_head =
      k + static_cast<int64_t>(b) * seq * kv_stride + static_cast<int64_t>(kvh) * shape.head_dim;
  const T* v_head =
      v + static_cast<int64_t>(b) * seq * kv_stride + static_cast<int64_t>(kvh) * shape.head_dim;
  const int tx = threadIdx.x % 16;
  const int ty = threadIdx.x / 16;
  const int q0 = qt * kTile;

  LoadTile<T, kD>(sq, q_head, q_stride, q0, seq, shape.head_dim);
  float m[4];
  float l[4];  // this thread's part of the row sum, reduced at the end
  float o[4][kCols];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int j = 0; j < kCols; ++j) o[i][j] = 0.f;
  }

  // Key tiles up to the diagonal one; tile 0 holds key 0, which every row sees, so each row's
  // running max is finite from the first tile on.
  for (int kt = 0; kt <= qt; ++kt) {
    __syncthreads();
    LoadTile<T, kD>(sk, k_head, kv_stride, kt * kTile, seq, shape.head_dim);
    LoadTile<T, kD>(sv, v_head, kv_stride, kt * kTile, seq, shape.head_dim);
    __syncthreads();
    float s[4][4];
    TileDot<kD>(sq, sk, ty, tx, s);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = ty + 16 * i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[i][j] *= shape.scale;
        // Only the diagonal tile has keys after the query (and the keys past seq, which only
        // it can hold, are after every real query).
        if (kt == qt && tx + 16 * j > r) s[i][j] = -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      const float m_new = fmaxf(m[i], RowMax(mx));
      const float alpha = expf(m[i] - m_new);
      m[i] = m_new;
      l[i] *= alpha;
#pragma unroll
      for (int j = 0; j < kCols; ++j) o[i][j] *= alpha;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float p = expf(s[i][j] - m_new);
        l[i] += p;
        sp[r * kScoreStride + tx + 16 * j] = p;
      }
    }
    __syncthreads();
#pragma unroll 4
    for (int c = 0; c < kTile; ++c) {
      float pv[4];
      float vv[kCols];
#pragma unroll
      for (int i = 0; i < 4; ++i) pv[i] = sp[(ty + 16 * i) * kScoreStride + c];
#pragma unroll
      for (int j = 0; j < kCols; ++j) vv[j] = sv[c * (kD + 1) + tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < kCols; ++j) o[i][j] = fmaf(pv[i], vv[j], o[i][j]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float sum = RowSum(l[i]);
    const int row = q0 + ty + 16 * i;
    if (row >= seq) continue;
    const float inv = 1.f / sum;
    T* dst = out + (static_cast<int64_t>(b) * seq + row) * q_stride +
             static_cast<int64_t>(h) * shape.head_dim;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      if (tx + 16 * j < shape.head_dim) dst[tx + 16 * j] = FromFloat<T>(o[i][j] * inv);
    }
    if (tx == 0) lse[(static_cast<int64_t>(b) * shape.q_heads + h) * seq + row] = m[i] + logf(sum);
  }
}

// dK and dV of one (key tile, kv head, batch): loops over the group's query heads, in order,
// and over the query tiles from the diagonal on; the sums stay in registers.
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads)
    BackwardKvKernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                     const float* __restrict__ lse, const float* __restrict__ delta,
                     const T* __restrict__ dout, T* __restrict__ dk, T* __restrict__ dv,
                     AttentionShape shape) {
  constexpr int kCols = kD / 16;
  extern __shared__ float smem[];
  float* sk = smem;
  float* sv = sk + TileFloats<kD>();
  float* sq = sv + TileFloats<kD>();
  float* sdo = sq + TileFloats<kD>();
  float* sp = sdo + TileFloats<kD>();        // [kTile][kScoreStride]
  float* sds = sp + kTile * kScoreStride;    // [kTile][kScoreStride]
  float* slse = sds + kTile * kScoreStride;  // [kTile]
  float* sdelta = slse + kTile;              // [kTile]

  const int seq = shape.seq;
  const AttentionBlock block = DecodeAttentionBlock(shape.kv_heads, shape.batch);
  const int kt = block.tile_rank;
  const int kvh = block.head;
  const int b = block.batch;
  const int group = shape.q_heads / shape.kv_heads;
  const int64_t q_stride = static_cast<int64_t>(shape.q_heads) * shape.head_dim;
  const int64_t kv_stride = static_cast<int64_t>(shape.kv_heads) * shape.head_dim;
  const int64_t kv_offset =
      static_cast<int64_t>(b) * seq * kv_stride + static_cast<int64_t>(kvh) * shape.head_dim;
  const int tx = threadIdx.x % 16;
  const int ty = threadIdx.x / 16;
  const int k0 = kt * kTile;
  const int n_qt = (seq + kTile - 1) / kTile;

  LoadTile<T, kD>(sk, k + kv_offset, kv_stride, k0, seq, shape.head_dim);
  LoadTile<T, kD>(sv, v + kv_offset, kv_stride, k0, seq, shape.head_dim);
  // Thread owns keys ty + 16 i and dims tx + 16 j.
  float dk_acc[4][kCols];
  float dv_acc[4][kCols];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      dk_acc[i][j] = 0.f;
      dv_acc[i][j] = 0.f;
    }
  }

  for (int hh = 0; hh < group; ++hh) {
    const int h = kvh * group + hh;
    const int64_t q_offset =
        static_cast<int64_t>(b) * seq * q_stride + static_cast<int64_t>(h) * shape.head_dim;
    const float* lse_h = lse + (static_cast<int64_t>(b) * shape.q_heads + h) * seq;
    const float* delta_h = delta + (static_cast<int64_t>(b) * shape.q_heads + h) * seq;
    for (int qt = kt; qt < n_qt; ++qt) {
      const int q0 = qt * kTile;
      __syncthreads();
      LoadTile<T, kD>(sq, q + q_offset, q_stride, q0, seq, shape.head_dim);
      LoadTile<T, kD>(sdo, dout + q_offset, q_stride, q0, seq, shape.head_dim);
      if (threadIdx.x < kTile) {
        const int row = q0 + threadIdx.x;
        slse[threadIdx.x] = row < seq ? lse_h[row] : 0.f;
        sdelta[threadIdx.x] = row < seq ? delta_h[row] : 0.f;
      }
      __syncthreads();
      // Scores with queries as rows (ty) and keys as columns (tx).
      float s[4][4];
      float dp[4][4];
      TileDot<kD>(sq, sk, ty, tx, s);
      TileDot<kD>(sdo, sv, ty, tx, dp);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = ty + 16 * i;
        const int query = q0 + r;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = tx + 16 * j;
          const bool live = k0 + c <= query && query < seq;
          const float p = live ? expf(s[i][j] * shape.scale - slse[r]) : 0.f;
          sp[r * kScoreStride + c] = p;
          sds[r * kScoreStride + c] = p * (dp[i][j] - sdelta[r]);
        }
      }
      __syncthreads();
#pragma unroll 2
      for (int r = 0; r < kTile; ++r) {
        float pr[4];
        float dsr[4];
        float qv[kCols];
        float dov[kCols];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          pr[i] = sp[r * kScoreStride + ty + 16 * i];
          dsr[i] = sds[r * kScoreStride + ty + 16 * i];
        }
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          qv[j] = sq[r * (kD + 1) + tx + 16 * j];
          dov[j] = sdo[r * (kD + 1) + tx + 16 * j];
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int j = 0; j < kCols; ++j) {
            dv_acc[i][j] = fmaf(pr[i], dov[j], dv_acc[i][j]);
            dk_acc[i][j] = fmaf(dsr[i], qv[j], dk_acc[i][j]);
          }
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int key = k0 + ty + 16 * i;
    if (key >= seq) continue;
    const int64_t offset = kv_offset + key * kv_stride;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      if (tx + 16 * j >= shape.head_dim) continue;
      dk[offset + tx + 16 * j] = FromFloat<T>(dk_acc[i][j] * shape.scale);
      dv[offset + tx + 16 * j] = FromFloat<T>(dv_acc[i][j]);
    }
  }
}

// dQ of one (query tile, q head, batch): recomputes P and dS over the key tiles up to the
// diagonal (so dQ needs no atomics across the key tiles).
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads)
    BackwardQKernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                    const float* __restrict__ lse, const float* __restrict__ delta,
                    const T* __restrict__ dout, T* __restrict__ dq, AttentionShape shape) {
  constexpr int kCols = kD / 16;
  extern __shared__ float smem[];
  float* sq = smem;
  float* sdo = sq + TileFloats<kD>();
  float* sk = sdo + TileFloats<kD>();
  float* sv = sk + TileFloats<kD>();
  float* sds = sv + TileFloats<kD>();  // [kTile][kScoreStride]

  const int seq = shape.seq;
  const auto [qt, h, b, kvh] = DecodeQueryTileBlock(shape);
  const int64_t q_stride = static_cast<int64_t>(shape.q_heads) * shape.head_dim;
  const int64_t kv_stride = static_cast<int64_t>(shape.kv_heads) * shape.head_dim;
  const int64_t q_offset =
      static_cast<int64_t>(b) * seq * q_stride + static_cast<int64_t>(h) * shape.head_dim;
  const int64_t kv_offset =
      static_cast<int64_t>(b) * seq * kv_stride + static_cast<int64_t>(kvh) * shape.head_dim;
  const int tx = threadIdx.x % 16;
  const int ty = threadIdx.x / 16;
  const int q0 = qt * kTile;

  LoadTile<T, kD>(sq, q + q_offset, q_stride, q0, seq, shape.head_dim);
  LoadTile<T, kD>(sdo, dout + q_offset, q_stride, q0, seq, shape.head_dim);
  float row_lse[4];
  float row_delta[4];
  float dq_acc[4][kCols];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = q0 + ty + 16 * i;
    const int64_t index = (static_cast<int64_t>(b) * shape.q_heads + h) * seq + row;
    row_lse[i] = row < seq ? lse[index] : 0.f;
    row_delta[i] = row < seq ? delta[index] : 0.f;
#pragma unroll
    for (int j = 0; j < kCols; ++j) dq_acc[i][j] = 0.f;
  }

  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();
    LoadTile<T, kD>(sk, k + kv_offset, kv_stride, k0, seq, shape.head_dim);
    LoadTile<T, kD>(sv, v + kv_offset, kv_stride, k0, seq, shape.head_dim);
    __syncthreads();
    float s[4][4];
    float dp[4][4];
    TileDot<kD>(sq, sk, ty, tx, s);
    TileDot<kD>(sdo, sv, ty, tx, dp);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = ty + 16 * i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = tx + 16 * j;
        // Rows past seq are never stored; their keys past seq are zeros, so they stay finite.
        const float p = k0 + c <= q0 + r ? expf(s[i][j] * shape.scale - row_lse[i]) : 0.f;
        sds[r * kScoreStride + c] = p * (dp[i][j] - row_delta[i]);
      }
    }
    __syncthreads();
#pragma unroll 4
    for (int c = 0; c < kTile; ++c) {
      float dsv[4];
      float kv[kCols];
#pragma unroll
      for (int i = 0; i < 4; ++i) dsv[i] = sds[(ty + 16 * i) * kScoreStride + c];
#pragma unroll
      for (int j = 0; j < kCols; ++j) kv[j] = sk[c * (kD + 1) + tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < kCols; ++j) dq_acc[i][j] = fmaf(dsv[i], kv[j], dq_acc[i][j]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = q0 + ty + 16 * i;
    if (row >= seq) continue;
    const int64_t offset = q_offset + row * q_stride;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      if (tx + 16 * j < shape.head_dim) {
        dq[offset + tx + 16 * j] = FromFloat<T>(dq_acc[i][j] * shape.scale);
      }
    }
  }
}

template <int kD>
constexpr size_t ForwardSmemBytes() {
  return (3 * TileFloats<kD>() + kTile * kScoreStride) * sizeof(float);
}
template <int kD>
constexpr size_t BackwardKvSmemBytes() {
  return (4 * TileFloats<kD>() + 2 * kTile * kScoreStride + 2 * kTile) * sizeof(float);
}
template <int kD>
constexpr size_t BackwardQSmemBytes() {
  return (4 * TileFloats<kD>() + kTile * kScoreStride) * sizeof(float);
}

template <typename T, int kD>
LaunchStatus Forward(const T* q, const T* k, const T* v, T* out, float* lse,
                     const AttentionDims& dims, cudaStream_t stream) {
  const dim3 grid = AttentionGrid(dims, dims.q_heads);
  return LaunchAttentionKernel(ForwardKernel<T, kD>, grid, kThreads, ForwardSmemBytes<kD>(), stream,
                               "AttentionForward", q, k, v, out, lse, MakeAttentionShape(dims));
}

template <typename T, int kD>
LaunchStatus Backward(const T* q, const T* k, const T* v, const float* lse, const float* delta,
                      const T* dout, T* dq, T* dk, T* dv, const AttentionDims& dims,
                      cudaStream_t stream) {
  const AttentionShape shape = MakeAttentionShape(dims);
  const dim3 kv_grid = AttentionGrid(dims, dims.kv_heads);
  if (LaunchStatus status = LaunchAttentionKernel(
          BackwardKvKernel<T, kD>, kv_grid, kThreads, BackwardKvSmemBytes<kD>(), stream,
          "AttentionBackward (dk, dv)", q, k, v, lse, delta, dout, dk, dv, shape);
      !status.ok()) {
    return status;
  }
  const dim3 q_grid = AttentionGrid(dims, dims.q_heads);
  return LaunchAttentionKernel(BackwardQKernel<T, kD>, q_grid, kThreads, BackwardQSmemBytes<kD>(),
                               stream, "AttentionBackward (dq)", q, k, v, lse, delta, dout, dq,
                               shape);
}

}  // namespace

template <typename T>
LaunchStatus SimtAttentionForward(const T* q, const T* k, const T* v, T* out, float* lse,
                                  const AttentionDims& dims, cudaStream_t stream) {
  switch (SimtAttentionWidth(dims.head_dim)) {
    case 32:
      return Forward<T, 32>(q, k, v, out, lse, dims, stream);
    case 64:
      return Forward<T, 64>(q, k, v, out, lse, dims, stream);
    case 80:
      return Forward<T, 80>(q, k, v, out, lse, dims, stream);
    case 96:
      return Forward<T, 96>(q, k, v, out, lse, dims, stream);
    case 128:
      return Forward<T, 128>(q, k, v, out, lse, dims, stream);
    default:
      return LaunchStatus::InvalidArgument(
          "AttentionForward: head_dim = " + std::to_string(dims.head_dim) + " is not supported");
  }
}

template <typename T>
LaunchStatus SimtAttentionBackward(const T* q, const T* k, const T* v, const float* lse,
                                   const float* delta, const T* dout, T* dq, T* dk, T* dv,
                                   const AttentionDims& dims, cudaStream_t stream) {
  switch (SimtAttentionWidth(dims.head_dim)) {
    case 32:
      return Backward<T, 32>(q, k, v, lse, delta, dout, dq, dk, dv, dims, stream);
    case 64:
      return Backward<T, 64>(q, k, v, lse, delta, dout, dq, dk, dv, dims, stream);
    case 80:
      return Backward<T, 80>(q, k, v, lse, delta, dout, dq, dk, dv, dims, stream);
    case 96:
      return Backward<T, 96>(q, k, v, lse, delta, dout, dq, dk, dv, dims, stream);
    case 128:
      return Backward<T, 128>(q, k, v, lse, delta, dout, dq, dk, dv, dims, stream);
    default:
      return LaunchStatus::InvalidArgument(
          "AttentionBackward: head_dim = " + std::to_string(dims.head_dim) + " is not supported");
  }
}

#define SLUICE_INSTANTIATE(T)                                                                \
  template LaunchStatus SimtAttentionForward<T>(const T*, const T*, const T*, T*, float*,    \
                                                const AttentionDims&, cudaStream_t);         \
  template LaunchStatus SimtAttentionBackward<T>(const T*, const T*, const T*, const float*, \
                                                 const float*, const T*, T*, T*, T*,         \
                                                 const AttentionDims&, cudaStream_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(__nv_bfloat16)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::cuda::internal
