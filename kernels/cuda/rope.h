// CUDA backend of rotary position embedding, Hugging Face's rotate_half convention (dimension i
// pairs with i + head_dim / 2). Same semantics and shapes as kernels/ref/ops_rope.h: x, y
// [batch, seq, heads, head_dim], head_dim even, token t of each sequence at position t,
// inv_freq[i] = theta^(-2i / head_dim). cos and sin are computed in fp64 and rounded to fp32, as
// the reference and the CPU backend do, so the fp32 results agree with the CPU's to an ulp or so.
// y may alias x (in place). The backward rotates dy by -angle. Math in fp32, one rounding to T.
// head_dim <= 8192.
//
// T is float or __nv_bfloat16; the templates are instantiated for both in rope.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/launch_status.h"

namespace sluice::kernels::cuda {

template <typename T>
LaunchStatus RopeForward(const T* x, T* y, int64_t batch, int64_t seq, int64_t heads,
                         int64_t head_dim, float theta, cudaStream_t stream);

template <typename T>
LaunchStatus RopeBackward(const T* dy, T* dx, int64_t batch, int64_t seq, int64_t heads,
                          int64_t head_dim, float theta, cudaStream_t stream);

}  // namespace sluice::kernels::cuda
