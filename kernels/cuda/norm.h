// CUDA backend of LayerNorm (GPT-2) and RMSNorm (Llama) over the last dimension, and the fused
// residual add + norm of a pre-norm block. Same semantics as kernels/ref/ops_norm.h, with the
// dtypes of the CUDA column: x, y, dy, dx, gamma, beta (and a, b, r) in T; the saved mean and rstd
// in fp32; dgamma and dbeta in fp32 and ACCUMULATED (+=); dx OVERWRITTEN. beta and dbeta may be
// null (no bias). Any cols >= 1. y may alias x, dx may alias dy, r may alias a or b.
//
// Every result is bitwise the same run to run and for any pointer alignment: a thread owns the
// same columns whether it loads them 16 bytes at a time or element by element, and dgamma / dbeta
// go through per-row-group partials in the caller's workspace, summed in a fixed order.
//
// T is float or __nv_bfloat16; the templates are instantiated for both in norm.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/launch_status.h"

namespace sluice::kernels::cuda {

// x, y [rows, cols]; gamma, beta [cols]; mean, rstd [rows] (saved for the backward).
template <typename T>
LaunchStatus LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, float* mean,
                              float* rstd, int64_t rows, int64_t cols, float eps,
                              cudaStream_t stream);

template <typename T>
LaunchStatus RmsNormForward(const T* x, const T* gamma, T* y, float* rstd, int64_t rows,
                            int64_t cols, float eps, cudaStream_t stream);

// The residual add and the next norm in one pass: r = a + b (rounded to T and written out, the
// residual stream), then y = LayerNorm(r) / RmsNorm(r) exactly as the unfused ops would compute it
// from the stored r. a, b, r, y [rows, cols].
template <typename T>
LaunchStatus AddLayerNormForward(const T* a, const T* b, T* r, const T* gamma, const T* beta, T* y,
                                 float* mean, float* rstd, int64_t rows, int64_t cols, float eps,
                                 cudaStream_t stream);

template <typename T>
LaunchStatus AddRmsNormForward(const T* a, const T* b, T* r, const T* gamma, T* y, float* rstd,
                               int64_t rows, int64_t cols, float eps, cudaStream_t stream);

// Scratch bytes LayerNormBackward and RmsNormBackward need for [rows, cols], either dtype: the
// per-row-group dgamma / dbeta partials, at most max(8 MiB, 1 KiB x cols) (8 MiB at 8192 cols).
size_t NormBackwardWorkspaceBytes(int64_t rows, int64_t cols);

// dx [rows, cols] overwritten; dgamma, dbeta [cols] += the sums over rows. workspace: at least
// NormBackwardWorkspaceBytes(rows, cols) bytes, 4-byte aligned, not used by another stream until
// the kernels are done.
template <typename T>
LaunchStatus LayerNormBackward(const T* x, const T* gamma, const float* mean, const float* rstd,
                               const T* dy, T* dx, float* dgamma, float* dbeta, int64_t rows,
                               int64_t cols, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream);

template <typename T>
LaunchStatus RmsNormBackward(const T* x, const T* gamma, const float* rstd, const T* dy, T* dx,
                             float* dgamma, int64_t rows, int64_t cols, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream);

}  // namespace sluice::kernels::cuda
