#include "engine/data/token_region.h"

#include <algorithm>
#include <utility>

#include "runtime/check.h"

namespace sluice::data {

TokenRegion::TokenRegion(const TokenFile& file)
    : TokenRegion(file, {Stretch{0, file.num_tokens()}}) {}

TokenRegion::TokenRegion(const TokenFile& file, std::vector<Stretch> stretches)
    : file_(&file), stretches_(std::move(stretches)) {
  starts_.reserve(stretches_.size() + 1);
  starts_.push_back(0);
  int64_t file_end = 0;
  for (const Stretch& s : stretches_) {
    SLUICE_CHECK(s.count > 0 && s.begin >= file_end && s.begin + s.count <= file.num_tokens())
        << "stretch [" << s.begin << ", " << s.begin + s.count << ") after token " << file_end
        << " of " << file.num_tokens();
    file_end = s.begin + s.count;
    starts_.push_back(starts_.back() + s.count);
  }
}

size_t TokenRegion::StretchOf(int64_t i) const {
  SLUICE_DCHECK(i >= 0 && i < size());
  // The last stretch whose first token is at or before i.
  const auto it = std::upper_bound(starts_.begin(), starts_.end() - 1, i);
  return static_cast<size_t>(it - starts_.begin()) - 1;
}

int64_t TokenRegion::FileIndex(int64_t i) const {
  SLUICE_CHECK(i >= 0 && i < size()) << "token " << i << " of a region of " << size();
  const size_t k = StretchOf(i);
  return stretches_[k].begin + (i - starts_[k]);
}

void TokenRegion::CopyToInt32(int64_t begin, int64_t count, int32_t* out) const {
  SLUICE_CHECK(begin >= 0 && count >= 0 && begin + count <= size())
      << "copy [" << begin << ", " << begin + count << ") of a region of " << size() << " tokens";
  if (count == 0) return;
  for (size_t k = StretchOf(begin); count > 0; ++k) {
    const int64_t offset = begin - starts_[k];
    const int64_t n = std::min(count, stretches_[k].count - offset);
    file_->tokens().CopyToInt32(stretches_[k].begin + offset, n, out);
    out += n;
    begin += n;
    count -= n;
  }
}

}  // namespace sluice::data
