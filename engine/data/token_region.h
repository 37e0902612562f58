// One part (training or validation) of a file's tokens, read as a single stream: the
// concatenation, in file order, of one or more disjoint stretches of the file. The sampler and
// the validation iterator index this stream; only here does a stream index become a file index.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/data/token_file.h"

namespace sluice::data {

class TokenRegion {
 public:
  struct Stretch {
    int64_t begin = 0;  // file index of the stretch's first token
    int64_t count = 0;
  };

  TokenRegion() = default;
  // The whole file.
  explicit TokenRegion(const TokenFile& file);
  // Stretches must be non-empty, ascending and disjoint.
  TokenRegion(const TokenFile& file, std::vector<Stretch> stretches);

  const TokenFile* file() const { return file_; }
  const std::vector<Stretch>& stretches() const { return stretches_; }
  int64_t size() const { return starts_.empty() ? 0 : starts_.back(); }
  // Non-overlapping windows of seq_len + 1 tokens at stride seq_len from the stream's start.
  int64_t NumWindows(int64_t seq_len) const {
    return size() > seq_len ? (size() - 1) / seq_len : 0;
  }

  // The file index of the stream's `i`-th token.
  int64_t FileIndex(int64_t i) const;
  // Widens stream tokens [begin, begin + count) into `out`, across stretch boundaries.
  void CopyToInt32(int64_t begin, int64_t count, int32_t* out) const;

 private:
  size_t StretchOf(int64_t i) const;

  const TokenFile* file_ = nullptr;
  std::vector<Stretch> stretches_;
  // starts_[k]: stream index of stretch k's first token; one more entry holds the size.
  std::vector<int64_t> starts_;
};

}  // namespace sluice::data
