// CPU backend of the whole-array conversions between fp32 and bf16 / fp16 (16-bit values as
// uint16_t bits). Bit-exact with kernels/ref/half.h: round to nearest even, NaN stays a quiet NaN.
// On AVX2 CPUs (kernels/cpu/cpu_features.h, SelectedIsa()) the AVX2+F16C variant runs, else a
// portable loop; OpenMP splits large arrays over the caller's threads (0 = OpenMP's default).
#pragma once

#include <cstdint>

namespace sluice::kernels::cpu {

void ConvertF32ToBf16(const float* src, uint16_t* dst, int64_t n, int num_threads = 0);
void ConvertBf16ToF32(const uint16_t* src, float* dst, int64_t n, int num_threads = 0);
void ConvertF32ToF16(const float* src, uint16_t* dst, int64_t n, int num_threads = 0);
void ConvertF16ToF32(const uint16_t* src, float* dst, int64_t n, int num_threads = 0);

}  // namespace sluice::kernels::cpu
