// What attention.cu (argument checks, dispatch) asks of attention_simt.cu and attention_mma.cu.
// The launchers here assume checked arguments: dims accepted, batch and seq > 0, pointers set.
// Included by kernels/cuda/attention*.cu only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/launch_check.h"
#include "kernels/cuda/launch_status.h"
#include "kernels/ref/ops_attention.h"

namespace sluice::kernels::cuda::internal {

// Query and key rows per tile of every attention kernel's grid (the tensor-core kernels step
// through smaller sub-tiles inside some blocks).
inline constexpr int kAttentionTile = 64;

// Every attention grid is 1-D over (tile rank, head, batch), heads fastest and the tile rank
// slowest, so that the blocks with the most causal work (rank 0: the last query tile, or the
// first key tile) are dispatched first across all heads, and the last wave is the lightest.
inline constexpr int64_t kAttentionMaxBlocks = 0x7fffffff;
inline int64_t AttentionTiles(int64_t seq) { return (seq + kAttentionTile - 1) / kAttentionTile; }
inline dim3 AttentionGrid(const AttentionDims& dims, int64_t heads) {
  return dim3(static_cast<unsigned>(AttentionTiles(dims.seq) * heads * dims.batch));
}

// What every attention kernel is given of the shape (all of it fits int: attention.cu checks).
struct AttentionShape {
  int batch;
  int seq;
  int q_heads;
  int kv_heads;
  int head_dim;
  float scale;  // 1 / sqrt(head_dim)
};
inline AttentionShape MakeAttentionShape(const AttentionDims& dims) {
  return AttentionShape{static_cast<int>(dims.batch),
                        static_cast<int>(dims.seq),
                        static_cast<int>(dims.q_heads),
                        static_cast<int>(dims.kv_heads),
                        static_cast<int>(dims.head_dim),
                        static_cast<float>(1.0 / std::sqrt(static_cast<double>(dims.head_dim)))};
}

#if defined(__CUDACC__)
// Sets the kernel's dynamic shared memory allowance (above the 48 KiB default) and launches it.
template <typename Kernel, typename... Args>
LaunchStatus LaunchAttentionKernel(Kernel kernel, dim3 grid, int threads, size_t smem_bytes,
                                   cudaStream_t stream, const char* what, Args... args) {
  SLUICE_CUDA_LAUNCH_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem_bytes)));
  kernel<<<grid, threads, smem_bytes, stream>>>(args...);
  return AfterLaunch(what);
}

struct AttentionBlock {
  int tile_rank;
  int head;
  int batch;
};
__device__ __forceinline__ AttentionBlock DecodeAttentionBlock(int heads, int batch) {
  const int per_rank = heads * batch;
  const int hb = static_cast<int>(blockIdx.x) % per_rank;
  return AttentionBlock{static_cast<int>(blockIdx.x) / per_rank, hb % heads, hb / heads};
}

// The block of a forward or dQ grid: its query tile (the tiles in reverse, so that the longest
// rows start first), q head and batch, and the kv head that the q head reads.
struct QueryTileBlock {
  int qt;
  int head;
  int batch;
  int kv_head;
};
__device__ __forceinline__ QueryTileBlock DecodeQueryTileBlock(const AttentionShape& shape) {
  const AttentionBlock block = DecodeAttentionBlock(shape.q_heads, shape.batch);
  const int qt = (shape.seq + kAttentionTile - 1) / kAttentionTile - 1 - block.tile_rank;
  return QueryTileBlock{qt, block.head, block.batch, block.head / (shape.q_heads / shape.kv_heads)};
}
#endif

// The compiled width of the SIMT kernels that a head_dim runs at: the next of 32, 64, 80, 96 and
// 128 (the columns past head_dim are zero padding), or 0 past 128.
inline int SimtAttentionWidth(int64_t head_dim) {
  for (int width : {32, 64, 80, 96, 128}) {
    if (head_dim >= 1 && head_dim <= width) return width;
  }
  return 0;
}

// head_dim 64 or 128: the tensor-core kernels' shapes.
inline bool MmaAttentionSupports(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

template <typename T>
LaunchStatus SimtAttentionForward(const T* q, const T* k, const T* v, T* out, float* lse,
                                  const AttentionDims& dims, cudaStream_t stream);

// delta: D_i = dout_i . out_i, [batch, q_heads, seq] fp32, already computed on the stream.
template <typename T>
LaunchStatus SimtAttentionBackward(const T* q, const T* k, const T* v, const float* lse,
                                   const float* delta, const T* dout, T* dq, T* dk, T* dv,
                                   const AttentionDims& dims, cudaStream_t stream);

// Also need 16-byte aligned tensors.
LaunchStatus MmaAttentionForward(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                 const __nv_bfloat16* v, __nv_bfloat16* out, float* lse,
                                 const AttentionDims& dims, cudaStream_t stream);

LaunchStatus MmaAttentionBackward(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                  const __nv_bfloat16* v, const float* lse, const float* delta,
                                  const __nv_bfloat16* dout, __nv_bfloat16* dq, __nv_bfloat16* dk,
                                  __nv_bfloat16* dv, const AttentionDims& dims,
                                  cudaStream_t stream);

}  // namespace sluice::kernels::cuda::internal
