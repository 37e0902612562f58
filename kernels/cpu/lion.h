// CPU Lion over flat fp32 master parameters and momentum, fused into one pass as CPU Adam is
// (kernels/cpu/adam.h): reads the gradient (fp32, bf16 or fp16) and scales it by the caller's
// combined factor (loss-scale inverse times clip coefficient), updates p and m in place, and
// optionally writes a bf16 or fp16 copy of the updated parameters into the caller's staging
// buffer. Semantics and rounding: kernels/ref/lion_ref.h. AVX-512, AVX2 and scalar variants are
// chosen by CPUID at run time (ForceIsa or SLUICE_ISA lower the choice) and agree bit for bit; the
// threads split the range as Adam's do (kernels/cpu/adam_parallel.h).
//
// Usage:
//   LionTensors t{.params = p, .exp_avg = m, .grads = g_bf16, .grad_type = AdamGradType::kBF16,
//                 .param_copy = staging, .copy_type = AdamCopyType::kBF16, .count = n};
//   LionStep(t, LionHyperparams{.lr = 1e-4f, .weight_decay = 0.1f}, clip_coefficient / scale);
#pragma once

#include <string>

#include "kernels/cpu/adam_parallel.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/ref/lion_ref.h"

namespace sluice::kernels {

// Empty when LionStep may run with these arguments, else what is wrong, naming the field.
std::string LionStepArgsError(const LionTensors& t, const LionHyperparams& hyper,
                              const AdamThreading& threading);

// One optimizer step over t.count elements. Aborts on arguments LionStepArgsError rejects.
void LionStep(const LionTensors& t, const LionHyperparams& hyper, float grad_scale,
              const AdamThreading& threading = {});

// The variant LionStep runs now: SelectedIsa().
Isa LionIsa();

}  // namespace sluice::kernels
