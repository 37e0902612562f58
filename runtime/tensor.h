// Tensor views: a pointer, an element type, a contiguous row-major shape and the place the bytes
// live. A Tensor never owns memory; whoever allocated the bytes (device arena, pinned pool, swap
// buffer) keeps them alive for as long as views of them are in use.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <type_traits>

#include "runtime/check.h"
#include "runtime/dtype.h"
#include "runtime/memory_kinds.h"
#include "runtime/status.h"

namespace sluice {

// Dimensions of a contiguous row-major tensor. Rank 0 is a scalar (one element).
class Shape {
 public:
  static constexpr int kMaxRank = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);  // NOLINT: implicit so `Reshape({4, 8})` reads well
  explicit Shape(std::span<const int64_t> dims);

  int rank() const { return rank_; }
  int64_t dim(int i) const {
    SLUICE_CHECK(i >= 0 && i < rank_) << "dimension " << i << " of rank-" << rank_ << " shape";
    return dims_[i];
  }
  std::span<const int64_t> dims() const { return {dims_.data(), static_cast<size_t>(rank_)}; }
  int64_t numel() const;

  // "[4, 1024]"; a scalar is "[]".
  std::string ToString() const;

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i) {
      if (a.dims_[i] != b.dims_[i]) return false;
    }
    return true;
  }

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

// The element type a C++ type stands for in `Tensor::data<T>()`: float is f32, double f64;
// uint16_t holds the bits of bf16 and f16 alike, so either dtype matches it.
template <typename T>
constexpr bool DTypeHolds(DType dtype) {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) {
    return dtype == DType::kF32;
  } else if constexpr (std::is_same_v<U, double>) {
    return dtype == DType::kF64;
  } else if constexpr (std::is_same_v<U, uint16_t>) {
    return dtype == DType::kBF16 || dtype == DType::kF16;
  } else {
    static_assert(sizeof(U) == 0, "Tensor::data<T>() supports float, double and uint16_t");
    return false;
  }
}

class Tensor {
 public:
  // An empty f32 view of nothing: rank 1, zero elements, no data.
  Tensor() : shape_({0}) {}
  Tensor(void* data, DType dtype, Shape shape, MemoryTier tier = MemoryTier::kHost,
         int device_index = 0);

  void* raw_data() const { return data_; }
  // Typed access; aborts when T does not hold the tensor's dtype (see DTypeHolds).
  template <typename T>
  T* data() const {
    SLUICE_CHECK(DTypeHolds<T>(dtype_)) << "Tensor::data<T>() with a type that does not hold "
                                        << DTypeName(dtype_) << ": " << ToString();
    return static_cast<T*>(data_);
  }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_.dim(i); }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  MemoryTier tier() const { return tier_; }
  int device_index() const { return device_index_; }

  // Rows [begin, end) along dimension 0, sharing the bytes. Aborts unless
  // 0 <= begin <= end <= dim(0) and rank >= 1: slicing out of bounds is a programming error.
  Tensor Slice(int64_t begin, int64_t end) const;
  // The same bytes seen with another shape; an error naming both shapes when the element counts
  // differ.
  Result<Tensor> Reshape(const Shape& shape) const;
  // The same bytes as rank 1.
  Tensor Flatten() const;

  // "bf16[4, 1024] on device:0", "f32[8] on host_pinned".
  std::string ToString() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
  MemoryTier tier_ = MemoryTier::kHost;
  int device_index_ = 0;
};

}  // namespace sluice
