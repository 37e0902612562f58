#include "engine/data/token_view.h"

namespace sluice::data {
namespace {

template <typename T>
void Widen(const uint8_t* data, int64_t begin, int64_t count, int32_t* out) {
  const T* src = reinterpret_cast<const T*>(data) + begin;
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(src[i]);
}

}  // namespace

void TokenView::CopyToInt32(int64_t begin, int64_t count, int32_t* out) const {
  SLUICE_CHECK(begin >= 0 && count >= 0 && begin + count <= size_)
      << "copy [" << begin << ", " << begin + count << ") of " << size_ << " tokens";
  switch (width_) {
    case 1:
      Widen<uint8_t>(data_, begin, count, out);
      break;
    case 2:
      Widen<uint16_t>(data_, begin, count, out);
      break;
    default:
      Widen<uint32_t>(data_, begin, count, out);
      break;
  }
}

}  // namespace sluice::data
