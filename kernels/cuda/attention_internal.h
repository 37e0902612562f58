// What attention.cu (argument checks, dispatch) asks of attention_simt.cu and attention_mma.cu.
// The launchers here assume checked arguments: dims accepted, batch and seq > 0, pointers set.
// Included by kernels/cuda/attention*.cu only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

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

#if defined(__CUDACC__)
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
#endif

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
