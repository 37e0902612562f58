// Mixed precision on the CPU backend. The CPU ops compute in fp32; what changes with the mode is
// how the parameters are stored between steps and what the optimizer writes back:
//   f32:  the model's fp32 parameter buffer is the optimizer's master copy, updated in place.
//   bf16: the model stores bf16 parameters; the optimizer keeps fp32 master weights and writes
//         the rounded bf16 copy straight into the model's buffer (the Adam kernel's copy-out).
//   f16:  the model stores fp16 VALUES in fp32 storage (the model has no fp16 storage dtype);
//         the optimizer keeps fp32 master weights, writes an fp16 copy and widens it into the
//         model. The accumulated gradient of the scaled loss is rounded to fp16 before the
//         step, so a gradient past 65504 becomes inf exactly where an fp16 backward would have
//         overflowed: that is the overflow the dynamic loss scaler reacts to.
// Gradients always accumulate in fp32 over the micro-batches of a step.
#pragma once

#include <cstdint>
#include <string_view>

#include "kernels/ref/adam_ref.h"
#include "runtime/dtype.h"

namespace sluice::train {

enum class Precision : uint8_t { kF32 = 0, kBF16, kF16 };

std::string_view PrecisionName(Precision precision);  // "f32", "bf16", "f16"
// model.dtype (which the config resolves from the bf16/fp16 sections) -> the mode.
Precision PrecisionOf(DType model_dtype);
// Storage dtype of the model's flat parameter buffer.
DType ModelParamDType(Precision precision);
// What the Adam kernel writes besides the master weights.
kernels::AdamCopyType AdamCopyTypeFor(Precision precision);

// Rounds each value to the nearest fp16 (round to nearest even; past 65504 becomes inf) and
// back, in place.
void RoundToF16InPlace(float* data, int64_t count, int num_threads);

}  // namespace sluice::train
