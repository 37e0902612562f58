// A read-only view of a token stream stored 1, 2 or 4 bytes per token (text bytes, uint16,
// uint32), pointing into a mapped file: nothing is copied until a batch is assembled.
#pragma once

#include <bit>
#include <cstdint>
#include <span>

#include "runtime/check.h"

namespace sluice::data {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and read in place");

class TokenView {
 public:
  TokenView() = default;
  TokenView(const void* data, int64_t size, int width)
      : data_(static_cast<const uint8_t*>(data)), size_(size), width_(width) {
    SLUICE_CHECK(width == 1 || width == 2 || width == 4) << "token width " << width;
    SLUICE_CHECK_GE(size, 0);
  }

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int width() const { return width_; }  // bytes per token

  uint32_t operator[](int64_t i) const {
    SLUICE_DCHECK(i >= 0 && i < size_);
    switch (width_) {
      case 1:
        return data_[i];
      case 2:
        return reinterpret_cast<const uint16_t*>(data_)[i];
      default:
        return reinterpret_cast<const uint32_t*>(data_)[i];
    }
  }

  TokenView Slice(int64_t begin, int64_t count) const {
    SLUICE_CHECK(begin >= 0 && count >= 0 && begin + count <= size_)
        << "slice [" << begin << ", " << begin + count << ") of " << size_ << " tokens";
    return TokenView(data_ + begin * width_, count, width_);
  }

  // Typed access without a copy; the width must match.
  std::span<const uint8_t> AsU8() const {
    SLUICE_CHECK_EQ(width_, 1);
    return {data_, static_cast<size_t>(size_)};
  }
  std::span<const uint16_t> AsU16() const {
    SLUICE_CHECK_EQ(width_, 2);
    return {reinterpret_cast<const uint16_t*>(data_), static_cast<size_t>(size_)};
  }
  std::span<const uint32_t> AsU32() const {
    SLUICE_CHECK_EQ(width_, 4);
    return {reinterpret_cast<const uint32_t*>(data_), static_cast<size_t>(size_)};
  }

  // Widens tokens [begin, begin + count) into `out`.
  void CopyToInt32(int64_t begin, int64_t count, int32_t* out) const;

 private:
  const uint8_t* data_ = nullptr;
  int64_t size_ = 0;
  int width_ = 1;
};

}  // namespace sluice::data
