// The per-ISA conversion loops behind kernels/cpu/ops_convert.h, each over one contiguous range.
#pragma once

#include <cstdint>

namespace sluice::kernels::cpu::internal {

// Defined in ops_convert_avx2.cpp (compiled with -mavx2 -mfma -mf16c); call only when
// SelectedIsa() >= Isa::kAvx2.
void F32ToBf16Avx2(const float* src, uint16_t* dst, int64_t n);
void Bf16ToF32Avx2(const uint16_t* src, float* dst, int64_t n);
void F32ToF16Avx2(const float* src, uint16_t* dst, int64_t n);
void F16ToF32Avx2(const uint16_t* src, float* dst, int64_t n);

}  // namespace sluice::kernels::cpu::internal
