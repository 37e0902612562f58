#include "runtime/tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace sluice {
namespace {

void CheckDims(std::span<const int64_t> dims) {
  SLUICE_CHECK_LE(dims.size(), static_cast<size_t>(Shape::kMaxRank)) << "shape rank too large";
  int64_t numel = 1;
  for (int64_t d : dims) {
    SLUICE_CHECK_GE(d, 0) << "negative dimension in shape";
    // numel must fit int64 so nbytes and offsets cannot wrap.
    SLUICE_CHECK(d == 0 || numel <= std::numeric_limits<int64_t>::max() / d)
        << "shape element count overflows int64";
    numel *= d;
  }
}

}  // namespace

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims)) {}

Shape::Shape(std::span<const int64_t> dims) {
  CheckDims(dims);
  rank_ = static_cast<int>(dims.size());
  for (int i = 0; i < rank_; ++i) dims_[i] = dims[i];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

std::string Shape::ToString() const { return fmt::format("[{}]", fmt::join(dims(), ", ")); }

Tensor::Tensor(void* data, DType dtype, Shape shape, MemoryTier tier, int device_index)
    : data_(data), dtype_(dtype), shape_(shape), tier_(tier), device_index_(device_index) {
  SLUICE_CHECK_GE(device_index, 0) << "negative device index";
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  SLUICE_CHECK_GE(rank(), 1) << "Slice of a scalar: " << ToString();
  SLUICE_CHECK(0 <= begin && begin <= end && end <= dim(0))
      << "Slice(" << begin << ", " << end << ") out of bounds of " << ToString();
  std::array<int64_t, Shape::kMaxRank> dims{};
  std::span<const int64_t> old_dims = shape_.dims();
  std::copy(old_dims.begin(), old_dims.end(), dims.begin());
  dims[0] = end - begin;
  Shape sliced(std::span<const int64_t>(dims.data(), old_dims.size()));
  int64_t row_elements = dim(0) == 0 ? 0 : numel() / dim(0);
  char* base = static_cast<char*>(data_);
  char* start = base == nullptr
                    ? nullptr
                    : base + static_cast<size_t>(begin * row_elements) * DTypeSize(dtype_);
  return Tensor(start, dtype_, sliced, tier_, device_index_);
}

Result<Tensor> Tensor::Reshape(const Shape& shape) const {
  if (shape.numel() != numel()) {
    return InvalidArgumentError("cannot reshape {} ({} elements) to {} ({} elements)", ToString(),
                                numel(), shape.ToString(), shape.numel());
  }
  return Tensor(data_, dtype_, shape, tier_, device_index_);
}

Tensor Tensor::Flatten() const {
  return Tensor(data_, dtype_, Shape({numel()}), tier_, device_index_);
}

std::string Tensor::ToString() const {
  if (tier_ == MemoryTier::kDevice) {
    return fmt::format("{}{} on device:{}", DTypeName(dtype_), shape_.ToString(), device_index_);
  }
  return fmt::format("{}{} on {}", DTypeName(dtype_), shape_.ToString(), MemoryTierName(tier_));
}

}  // namespace sluice
