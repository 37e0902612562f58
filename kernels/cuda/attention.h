// Causal self-attention on the GPU, multi-head or grouped-query, forward and backward, without
// ever holding the [seq, seq] score matrix (FlashAttention-2's tiling and online softmax).
// Semantics, layouts and the GQA head mapping are those of kernels/ref/ops_attention.h:
//   q, out, dq, dout [batch, seq, q_heads, head_dim];  k, v, dk, dv [batch, seq, kv_heads,
//   head_dim];  lse [batch, q_heads, seq] fp32;  scale 1 / sqrt(head_dim);  query head h reads
//   key/value head h / (q_heads / kv_heads).  dq, dk and dv are overwritten.
// head_dim 1 to 128 (the SIMT kernels are compiled for 32, 64, 80, 96 and 128 and run other
// head_dims zero-padded to the next of those); any seq >= 1 (tiles have masked tails).
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
//
// A third implementation, bf16 only: cuDNN's fused attention (kernels/cuda/attention_cudnn.h),
// where the build has cuDNN. The launchers taking AttentionOptions choose between ours and cuDNN's
// (AttentionImpl); those without options always run ours.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/launch_status.h"
#include "kernels/ref/ops_attention.h"

namespace sluice::kernels::cuda {

class CudnnAttention;  // kernels/cuda/attention_cudnn.h

enum class AttentionPass { kForward, kBackward };

// Whose attention runs: ours (the tensor-core or SIMT kernels above), cuDNN's, or kAuto's pick.
enum class AttentionImpl { kAuto, kOwn, kCudnn };

// What kAuto runs for bf16 where it can run cuDNN (a context is given, head_dim a multiple of 8 up
// to 128). The one switch between the two, set from bench_kernels' attention.* and
// attention.cudnn.* rows on the GPU; float always runs ours.
inline constexpr AttentionImpl kAttentionAutoBf16 = AttentionImpl::kCudnn;

struct AttentionOptions {
  AttentionImpl impl = AttentionImpl::kAuto;
  // Needed for kCudnn; with kAuto, cuDNN is only considered when it is set. Not owned.
  CudnnAttention* cudnn = nullptr;
};

// kOwn or kCudnn: what the launchers below run for T, dims and options. kCudnn with T = float or
// no context resolves to kCudnn all the same (the launch then refuses it).
template <typename T>
AttentionImpl ResolveAttentionImpl(const AttentionDims& dims, const AttentionOptions& options);

// Bytes of workspace the launchers below need for pass under options:
// AttentionBackwardWorkspaceBytes (backward) or 0 (forward) for ours, CudnnAttentionWorkspaceBytes
// for cuDNN's (which builds the cuDNN graph of dims on first use: host allocations, possibly a
// device synchronization).
template <typename T>
LaunchStatus AttentionWorkspaceBytes(const AttentionDims& dims, AttentionPass pass,
                                     const AttentionOptions& options, size_t* bytes);

template <typename T>
LaunchStatus AttentionForward(const T* q, const T* k, const T* v, T* out, float* lse,
                              const AttentionDims& dims, const AttentionOptions& options,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream);

template <typename T>
LaunchStatus AttentionBackward(const T* q, const T* k, const T* v, const T* out, const float* lse,
                               const T* dout, T* dq, T* dk, T* dv, const AttentionDims& dims,
                               const AttentionOptions& options, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream);

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
