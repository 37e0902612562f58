// Causal self-attention through cuDNN's fused scaled-dot-product attention (the cuDNN frontend's
// SDPA graphs), forward and backward, bf16 only, with exactly the semantics and layouts of
// kernels/cuda/attention.h (and so of kernels/ref/ops_attention.h): q, out, dq, dout [batch, seq,
// q_heads, head_dim]; k, v, dk, dv [batch, seq, kv_heads, head_dim]; lse [batch, q_heads, seq]
// fp32, the natural-log log-sum-exp of the scaled scores; scale 1 / sqrt(head_dim); causal mask
// top-left aligned with the diagonal kept; grouped-query heads; dq, dk, dv overwritten. The two
// implementations' lse are interchangeable: a forward of one feeds a backward of the other.
//
// A CudnnAttention holds a cuDNN handle and the graphs built so far, keyed by dims and direction.
// The first use of a shape (a workspace query or a launch) builds its graph: that allocates host
// memory, may compile kernels and may synchronize the device, so query the workspace (which
// builds) before timing or capturing. Later launches of the same shape allocate nothing; cuDNN's
// scratch comes from the caller's workspace. A context's launches are serialized by a mutex (the
// handle's stream is set per launch); give each thread its own context for concurrent launches.
//
// Determinism: the backward asks the frontend for cuDNN's deterministic algorithm. On Hopper that
// is the "dP workspace" variant, whose workspace grows as batch * q_heads * seq^2 * 2 bytes (seq
// padded to 64 and 128): 512 MiB at batch 2, 32 heads, seq 2048.
//
// Built without cuDNN (no libcudnn or no frontend headers at configure time), Create answers
// InvalidArgument("... built without cuDNN") and CudnnAttentionBuilt() is false.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/launch_status.h"
#include "kernels/ref/ops_attention.h"

namespace sluice::kernels::cuda {

// Whether this build has the cuDNN path (SLUICE_HAVE_CUDNN at configure time).
bool CudnnAttentionBuilt();

class CudnnAttention {
 public:
  struct Options {
    // Run-to-run bitwise identical gradients (our engine's contract); false lets cuDNN use its
    // faster atomic dQ accumulation. Only for measurement.
    bool deterministic_backward = true;
  };

  // A context on the current device. Fails where cuDNN is not built, or cudnnCreate fails (no
  // GPU, library mismatch).
  static LaunchStatus Create(const Options& options, std::unique_ptr<CudnnAttention>* context);
  static LaunchStatus Create(std::unique_ptr<CudnnAttention>* context) {
    return Create(Options{}, context);
  }

  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  const Options& options() const { return options_; }
  // "cuDNN 9.19.0 (frontend 1.32.0), deterministic backward": for logs and bench records.
  std::string Describe() const;

  // The handle and the graph cache, opaque here (attention_cudnn.cpp).
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  CudnnAttention(const Options& options, std::unique_ptr<Impl> impl);

  Options options_;
  std::unique_ptr<Impl> impl_;
};

// Bytes of workspace a forward or backward of dims needs; builds the graph for dims if it is not
// cached yet (see above). *bytes is 0 for empty dims. Rejects dims cuDNN does not support
// (head_dim must be a multiple of 8 and at most 128 here, as well as valid for attention.h).
LaunchStatus CudnnAttentionWorkspaceBytes(CudnnAttention& context, const AttentionDims& dims,
                                          AttentionPass pass, size_t* bytes);

// The launchers. Tensors must be 16-byte aligned; workspace_bytes at least what
// CudnnAttentionWorkspaceBytes answers (the workspace may be null when that is 0).
LaunchStatus AttentionForwardCudnn(CudnnAttention& context, const __nv_bfloat16* q,
                                   const __nv_bfloat16* k, const __nv_bfloat16* v,
                                   __nv_bfloat16* out, float* lse, const AttentionDims& dims,
                                   void* workspace, size_t workspace_bytes, cudaStream_t stream);

LaunchStatus AttentionBackwardCudnn(CudnnAttention& context, const __nv_bfloat16* q,
                                    const __nv_bfloat16* k, const __nv_bfloat16* v,
                                    const __nv_bfloat16* out, const float* lse,
                                    const __nv_bfloat16* dout, __nv_bfloat16* dq, __nv_bfloat16* dk,
                                    __nv_bfloat16* dv, const AttentionDims& dims, void* workspace,
                                    size_t workspace_bytes, cudaStream_t stream);

}  // namespace sluice::kernels::cuda
