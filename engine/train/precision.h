// Mixed precision on the CPU backend. The CPU ops compute in fp32; what changes with the mode is
// how the parameters are stored between steps (the ZeRO engine's parameter shard, and a flat
// model's buffer) and what the optimizer writes back:
//   f32:  the fp32 parameters are the optimizer's master copy, updated in place.
//   bf16: bf16 parameters; the optimizer keeps fp32 master weights and writes the rounded bf16
//         copy (the Adam kernel's copy-out).
//   f16:  fp16 parameters (a flat model holds fp16 VALUES in fp32 storage: it has no fp16
//         storage dtype); fp32 master weights. The accumulated gradient of the scaled loss is
//         rounded to fp16 before the step, so a gradient past 65504 becomes inf exactly where an
//         fp16 backward would have overflowed: that is the overflow the dynamic loss scaler
//         reacts to.
// Gradients always accumulate in fp32 over the micro-batches of a step.
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/dtype.h"

namespace sluice::train {

enum class Precision : uint8_t { kF32 = 0, kBF16, kF16 };

std::string_view PrecisionName(Precision precision);  // "f32", "bf16", "f16"
// model.dtype (which the config resolves from the bf16/fp16 sections) -> the mode.
Precision PrecisionOf(DType model_dtype);
// Storage dtype of a flat model's parameter buffer (ModelStorage::kFlat).
DType ModelParamDType(Precision precision);

// Rounds each value to the nearest fp16 (round to nearest even; past 65504 becomes inf) and
// back, in place.
void RoundToF16InPlace(float* data, int64_t count, int num_threads);

}  // namespace sluice::train
