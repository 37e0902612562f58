// Element types of tensors and buffers. Conversions (round-to-nearest-even) are numeric ops and
// live in kernels/ref/half.h so that kernels can inline them; this header names the types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/status.h"

namespace sluice {

// kF64 is the compute dtype of the fp64 reference ops backend (runtime/ops/ref/, finite-difference
// tests) only: models, checkpoints, collectives of the training path and configs use the first
// three, and the places that parse a dtype for them refuse f64.
enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2, kF64 = 3 };

constexpr size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kF64: return 8;
  }
  return 0;
}
std::string_view DTypeName(DType dtype);  // "f32", "bf16", "f16", "f64"
// Accepts Sluice's and the common spellings: f32/fp32/float32, bf16/bfloat16, f16/fp16/float16,
// f64/fp64/float64/double.
Result<DType> ParseDType(std::string_view name);

}  // namespace sluice
