// Causal self-attention on the GPU, multi-head or grouped-query, forward and backward, without
// ever holding the [seq, seq] score matrix (FlashAttention-2's tiling and online softmax).
// Semantics, layouts and the GQA head mapping are those of kernels/ref/ops_attention.h:
//   q, out, dq, dout [batch, seq, q_heads, head_dim];  k, v, dk, dv [batch, seq, kv_heads,
//   head_dim];  lse [batch, q_heads, seq] fp32;  scale 1 / sqrt(head_dim);  query head h reads
//   key/value head h / (q_heads / kv_heads).  dq, dk and dv are overwritten.
// head_dim must be 32, 64, 80, 96 or 128; any seq >= 1 (tiles have masked tails).
//
// Two implementations: a tiled SIMT one (fp32 math on CUDA cores) for every supported shape and
// both dtypes, and, for bf16 with head_dim 64 or 128 and 16-byte aligned tensors, one on the
// tensor cores (mma.sync m16n8k16, fp32 accumulation; P and dS are rounded to bf16 before their
// products, as FlashAttention does). AttentionForward/AttentionBackward pick the tensor-core one
// where it applies; the *Simt launchers always run the SIMT kernels, so tests and benchmarks can
// hold the two against each other.
//
// Deterministic: the backward computes dK and dV per (batch, kv head, key tile) block, summing the
// group's query heads in a fixed order, and dQ in a second kernel per (batch, q head, query tile)
// that recomputes P; no atomics.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/launch_status.h"
#include "kernels/ref/ops_attention.h"

namespace sluice::kernels::cuda {

// Bytes of workspace AttentionBackward needs: D_i = dout_i . out_i in fp32, one per query row and
// head (the forward needs none).
size_t AttentionBackwardWorkspaceBytes(const AttentionDims& dims);

// T is float or __nv_bfloat16.
template <typename T>
LaunchStatus AttentionForward(const T* q, const T* k, const T* v, T* out, float* lse,
                              const AttentionDims& dims, cudaStream_t stream);

template <typename T>
LaunchStatus AttentionBackward(const T* q, const T* k, const T* v, const T* out, const float* lse,
                               const T* dout, T* dq, T* dk, T* dv, const AttentionDims& dims,
                               void* workspace, size_t workspace_bytes, cudaStream_t stream);

// The same, always on the SIMT kernels.
template <typename T>
LaunchStatus AttentionForwardSimt(const T* q, const T* k, const T* v, T* out, float* lse,
                                  const AttentionDims& dims, cudaStream_t stream);

template <typename T>
LaunchStatus AttentionBackwardSimt(const T* q, const T* k, const T* v, const T* out,
                                   const float* lse, const T* dout, T* dq, T* dk, T* dv,
                                   const AttentionDims& dims, void* workspace,
                                   size_t workspace_bytes, cudaStream_t stream);

}  // namespace sluice::kernels::cuda
