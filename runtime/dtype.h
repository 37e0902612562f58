// Element types of tensors and buffers. Conversions (round-to-nearest-even) are numeric ops and
// live in kernels/ref/half.h so that kernels can inline them; this header names the types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/status.h"

namespace sluice {

enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

constexpr size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }
std::string_view DTypeName(DType dtype);  // "f32", "bf16", "f16"
// Accepts Sluice's and the common spellings: f32/fp32/float32, bf16/bfloat16, f16/fp16/float16.
Result<DType> ParseDType(std::string_view name);

}  // namespace sluice
