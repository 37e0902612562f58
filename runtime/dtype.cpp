#include "runtime/dtype.h"

namespace sluice {

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kF64: return "f64";
  }
  return "?";
}

Result<DType> ParseDType(std::string_view name) {
  if (name == "f32" || name == "fp32" || name == "float32" || name == "float") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "f16" || name == "fp16" || name == "float16" || name == "half") return DType::kF16;
  if (name == "f64" || name == "fp64" || name == "float64" || name == "double") return DType::kF64;
  return InvalidArgumentError("unknown dtype '{}': use f32, bf16 or f16 (f64 for reference ops)",
                              name);
}

}  // namespace sluice
