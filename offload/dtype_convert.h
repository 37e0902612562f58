// Widening parameter values to fp32 and rounding fp32 back to the parameter dtype, on the CPU:
// how the offloaded optimizer moves values between its fp32 master weights and a parameter
// shard (and what the engine's gathers and restores use too).
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace sluice::offload {

// fp32 <-> `dtype` (kF32 copies, kBF16 / kF16 round to nearest even), over `num_threads`
// threads (0: the kernels' default).
void ConvertFromF32(const float* src, void* dst, DType dtype, int64_t n, int num_threads);
void ConvertToF32(const void* src, DType dtype, float* dst, int64_t n, int num_threads);

}  // namespace sluice::offload
