// A host buffer of f32, bf16 or f16 elements read and written as floats, for comm tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/ref/half.h"
#include "runtime/dtype.h"

namespace sluice::testing {

// `value` as the dtype holds it (rounded to nearest even for 16-bit types).
inline float RoundTo(DType dtype, float value) {
  switch (dtype) {
    case DType::kF32:
      return value;
    case DType::kBF16:
      return kernels::Bf16ToF32(kernels::F32ToBf16(value));
    case DType::kF16:
      return kernels::F16ToF32(kernels::F32ToF16(value));
    case DType::kF64:
      return value;
  }
  return value;
}

class TypedBuffer {
 public:
  TypedBuffer(DType dtype, size_t count, float fill = -1.0f)
      : dtype_(dtype), count_(count), bytes_(count * DTypeSize(dtype)) {
    for (size_t i = 0; i < count; ++i) Set(i, fill);
  }
  void* data() { return count_ == 0 ? nullptr : bytes_.data(); }
  void* at(size_t index) { return bytes_.data() + index * DTypeSize(dtype_); }
  size_t size() const { return count_; }

  void Set(size_t i, float value) {
    if (dtype_ == DType::kF32) {
      std::memcpy(&bytes_[i * 4], &value, 4);
      return;
    }
    const uint16_t bits =
        dtype_ == DType::kBF16 ? kernels::F32ToBf16(value) : kernels::F32ToF16(value);
    std::memcpy(&bytes_[i * 2], &bits, 2);
  }
  float Get(size_t i) const {
    if (dtype_ == DType::kF32) {
      float value;
      std::memcpy(&value, &bytes_[i * 4], 4);
      return value;
    }
    uint16_t bits;
    std::memcpy(&bits, &bytes_[i * 2], 2);
    return dtype_ == DType::kBF16 ? kernels::Bf16ToF32(bits) : kernels::F16ToF32(bits);
  }

 private:
  DType dtype_;
  size_t count_;
  std::vector<uint8_t> bytes_;
};

}  // namespace sluice::testing
