#include "offload/dtype_convert.h"

#include <cstring>

#include "kernels/cpu/ops_convert.h"
#include "runtime/check.h"

namespace sluice::offload {

void ConvertFromF32(const float* src, void* dst, DType dtype, int64_t n, int num_threads) {
  switch (dtype) {
    case DType::kF32:
      if (n > 0 && src != dst) std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBF16:
      kernels::cpu::ConvertF32ToBf16(src, static_cast<uint16_t*>(dst), n, num_threads);
      return;
    case DType::kF16:
      kernels::cpu::ConvertF32ToF16(src, static_cast<uint16_t*>(dst), n, num_threads);
      return;
    case DType::kF64:  // not a parameter dtype (reference ops only)
      break;
  }
  SLUICE_CHECK(false) << "dtype " << static_cast<int>(dtype);
}

void ConvertToF32(const void* src, DType dtype, float* dst, int64_t n, int num_threads) {
  switch (dtype) {
    case DType::kF32:
      if (n > 0 && src != dst) std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBF16:
      kernels::cpu::ConvertBf16ToF32(static_cast<const uint16_t*>(src), dst, n, num_threads);
      return;
    case DType::kF16:
      kernels::cpu::ConvertF16ToF32(static_cast<const uint16_t*>(src), dst, n, num_threads);
      return;
    case DType::kF64:  // not a parameter dtype (reference ops only)
      break;
  }
  SLUICE_CHECK(false) << "dtype " << static_cast<int>(dtype);
}

}  // namespace sluice::offload
