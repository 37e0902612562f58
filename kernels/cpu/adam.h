// CPU Adam / AdamW over flat fp32 master parameters and moments, fused into one pass: reads the
// gradient (fp32, bf16 or fp16) and scales it by the caller's combined factor (loss-scale inverse
// times clip coefficient), updates p, m, v in place, and optionally writes a bf16 or fp16 copy of
// the updated parameters into the caller's staging buffer. Every byte moves once, which is all a
// memory-bound step can ask for. AVX-512, AVX2 and scalar variants are chosen by CPUID at run time
// (kernels/cpu/cpu_features.h; ForceIsa or SLUICE_ISA lower the choice).
//
// Usage:
//   AdamTensors t{.params = p, .exp_avg = m, .exp_avg_sq = v, .grads = g_bf16,
//                 .grad_type = AdamGradType::kBF16, .param_copy = staging,
//                 .copy_type = AdamCopyType::kBF16, .count = n};
//   AdamHyperparams h{.lr = 1e-4f, .weight_decay = 0.01f, .step = step};
//   AdamStep(t, h, 1.0f / loss_scale * clip_coefficient);
#pragma once

#include <string>

#include "kernels/cpu/adam_parallel.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/ref/adam_ref.h"

namespace sluice::kernels {

// Empty when AdamStep may run with these arguments, else what is wrong, naming the field. Callers
// that take any of them from users or configs check this first and turn it into a Status.
std::string AdamStepArgsError(const AdamTensors& t, const AdamHyperparams& hyper,
                              const AdamThreading& threading);

// One optimizer step over t.count elements. Aborts on arguments AdamStepArgsError rejects.
void AdamStep(const AdamTensors& t, const AdamHyperparams& hyper, float grad_scale,
              const AdamThreading& threading = {});

// The variant AdamStep runs now: SelectedIsa().
Isa AdamIsa();

// The memory probe for benchmarks: AdamStep's exact loads and stores, with the same threads,
// partition and non-temporal stores, but trivial arithmetic (p += g, m += g, v += |g|, copy =
// top 16 bits of p). Its rate is the bandwidth roofline AdamStep is measured against.
void AdamMemoryProbe(const AdamTensors& t, const AdamThreading& threading = {});

}  // namespace sluice::kernels
