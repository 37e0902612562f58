#include "engine/train/precision.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/ops_convert.h"

namespace sluice::train {

std::string_view PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kF32:
      return "f32";
    case Precision::kBF16:
      return "bf16";
    case Precision::kF16:
      return "f16";
  }
  return "?";
}

Precision PrecisionOf(DType model_dtype) {
  switch (model_dtype) {
    case DType::kBF16:
      return Precision::kBF16;
    case DType::kF16:
      return Precision::kF16;
    default:
      return Precision::kF32;
  }
}

DType ModelParamDType(Precision precision) {
  return precision == Precision::kBF16 ? DType::kBF16 : DType::kF32;
}

void RoundToF16InPlace(float* data, int64_t count, int num_threads) {
  // A bounded scratch block: rounding a whole model must not need a second full-size buffer.
  constexpr int64_t kBlock = int64_t{1} << 16;
  std::vector<uint16_t> half(static_cast<size_t>(std::min(count, kBlock)));
  for (int64_t begin = 0; begin < count; begin += kBlock) {
    const int64_t n = std::min(kBlock, count - begin);
    kernels::cpu::ConvertF32ToF16(data + begin, half.data(), n, num_threads);
    kernels::cpu::ConvertF16ToF32(half.data(), data + begin, n, num_threads);
  }
}

}  // namespace sluice::train
