// Scalar reference: whole-array conversions between fp32 and the 16-bit float storage types,
// element by element through half.h (round to nearest even, NaN stays a quiet NaN). 16-bit
// values travel as their bits in uint16_t. Every vectorized conversion must match these bit for
// bit.
#pragma once

#include <cstdint>

#include "kernels/ref/half.h"

namespace sluice::kernels::ref {

void ConvertF32ToBf16(const float* src, uint16_t* dst, int64_t n);
void ConvertBf16ToF32(const uint16_t* src, float* dst, int64_t n);
void ConvertF32ToF16(const float* src, uint16_t* dst, int64_t n);
void ConvertF16ToF32(const uint16_t* src, float* dst, int64_t n);

}  // namespace sluice::kernels::ref
