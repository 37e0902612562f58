// CPU backend of causal self-attention (multi-head or grouped-query): fp32, one (batch, head)
// at a time, the score and value products through Gemm (gemm.h: OpenBLAS or the deterministic
// GemmFixed, as device.cpu_gemm says) reading the heads in place through leading dimensions.
// Same semantics, layouts and saved state (lse only; probabilities recomputed in the backward)
// as kernels/ref/ops_attention.h.
//
// Threads: OpenBLAS threads the products (OPENBLAS_NUM_THREADS); GemmFixed runs them on the
// calling thread, as the softmax rows between them. An OpenMP region there, between two OpenBLAS
// calls, put two thread pools on the same cores and measured 10-30x slower on a loaded 2-core
// machine, while the rows cost O(seq^2) against the products' O(seq^2 * head_dim).
//
// workspace: AttentionWorkspaceElements(dims) floats from the caller (the [seq, seq]
// probabilities and their gradient for one head, plus a row of dout . out), so the engine can
// account it; it holds nothing between calls. The products compute the full [seq, seq] score
// matrix and mask the upper triangle, spending twice the causal FLOPs for whole GEMMs.
//
// On the vector path (ops_path.h) neither the GEMM nor the workspace is used: a tiled kernel
// (ops_vector_impl.h) walks blocks of 16 (AVX-512) or 8 (AVX2) keys with an online softmax,
// computing only the causal blocks and never a [seq, seq] matrix, each thread on its own
// (batch, head) in the forward and (batch, key/value head) in the backward, with per-thread
// scratch of O(seq * head_dim) kept between calls. num_threads sizes that team (0: OpenMP's
// default); the fixed path runs on the calling thread as above.
#pragma once

#include "kernels/ref/ops_attention.h"

namespace sluice::kernels::cpu {

void AttentionForward(const float* q, const float* k, const float* v, float* out, float* lse,
                      const AttentionDims& dims, float* workspace, int num_threads = 0);

void AttentionBackward(const float* q, const float* k, const float* v, const float* out,
                       const float* lse, const float* dout, float* dq, float* dk, float* dv,
                       const AttentionDims& dims, float* workspace, int num_threads = 0);

}  // namespace sluice::kernels::cpu
