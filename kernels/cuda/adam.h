// CUDA Adam / AdamW over flat fp32 master parameters and moments in device memory: the GPU twin of
// kernels/cpu/adam.h with the same types (kernels/ref/adam_ref.h) and the same result bit for bit.
// One fused pass reads the gradient (fp32, bf16 or fp16), scales it by the caller's combined
// factor (loss-scale inverse times clip coefficient), updates p, m, v in place and optionally
// writes a bf16 or fp16 copy of the updated parameters.
//
// Parity with the CPU: the step constants come from kernels::MakeAdamStepConstants on the host,
// the kernel performs AdamUpdateElement's operations in its order with non-contractible IEEE
// intrinsics (no FMA, IEEE sqrt and division), and the copy rounds as kernels/ref/half.h. Only a
// NaN's payload may differ (the GPU makes NaNs canonical); NaN stays NaN.
//
// Usage (all pointers in device memory):
//   AdamTensors t{.params = p, .exp_avg = m, .exp_avg_sq = v, .grads = g_bf16,
//                 .grad_type = AdamGradType::kBF16, .param_copy = p_bf16,
//                 .copy_type = AdamCopyType::kBF16, .count = n};
//   LaunchStatus s = cuda::AdamStep(t, AdamHyperparams{.lr = 1e-4f, .step = step}, scale, stream);
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/launch_status.h"
#include "kernels/ref/adam_ref.h"

namespace sluice::kernels::cuda {

// One optimizer step over t.count elements, enqueued on `stream`. InvalidArgument (nothing
// launched) for what AdamHyperparamsError or AdamTensorsError reject. 128-bit loads where every
// pointer allows them, else an element-wise kernel with the same result.
LaunchStatus AdamStep(const AdamTensors& t, const AdamHyperparams& hyper, float grad_scale,
                      cudaStream_t stream);

// The same step with grad_scale read by the kernel from device memory (one float), so that a
// clip coefficient computed on the device (from SquaredSum, kernels/cuda/flat_ops.h) needs no
// host round trip. Bitwise equal to AdamStep given the same value.
LaunchStatus AdamStepDeviceScale(const AdamTensors& t, const AdamHyperparams& hyper,
                                 const float* grad_scale, cudaStream_t stream);

}  // namespace sluice::kernels::cuda
