#include "engine/data/token_dataset.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace sluice::data {
namespace {

Status CheckOptions(const DataOptions& o) {
  if (o.train_path.empty()) {
    return InvalidArgumentError("data.train_path is not set: name a text or token file");
  }
  if (o.seq_len < 1) {
    return InvalidArgumentError("model.seq_len is {}: it must be at least 1", o.seq_len);
  }
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0)) {
    return InvalidArgumentError("data.val_fraction is {}: it must be in [0, 1)", o.val_fraction);
  }
  return OkStatus();
}

Status CheckLongEnough(const TokenFile& file, int64_t seq_len, std::string_view role) {
  if (file.num_tokens() >= seq_len + 1) return OkStatus();
  return InvalidArgumentError(
      "{} file '{}' holds {} tokens ({} bytes of data from byte offset {}), fewer than one window "
      "of model.seq_len + 1 = {} tokens; use a longer file or a smaller seq_len",
      role, file.path(), file.num_tokens(), file.num_tokens() * file.tokens().width(),
      file.header_bytes(), seq_len + 1);
}

// The split cuts the file into blocks of B windows (B * seq_len + 1 tokens, so a block alone
// holds B whole windows) and holds out round(val_fraction x blocks) of them at even intervals.
// B grows with the file up to kMaxBlockWindows: small blocks spread validation over the whole
// corpus, large ones keep rare the joins where a window runs from one stretch into the next.
constexpr int64_t kTargetBlocks = 200;
constexpr int64_t kMaxBlockWindows = 32;

struct Split {
  std::vector<TokenRegion::Stretch> train, val;
  int64_t block_tokens = 0;
  int64_t blocks = 0;
};

void Append(std::vector<TokenRegion::Stretch>& part, int64_t begin, int64_t count) {
  if (!part.empty() && part.back().begin + part.back().count == begin) {
    part.back().count += count;
  } else {
    part.push_back({begin, count});
  }
}

int64_t Total(const std::vector<TokenRegion::Stretch>& part) {
  int64_t n = 0;
  for (const auto& s : part) n += s.count;
  return n;
}

Split Interleave(int64_t n, int64_t seq_len, double fraction) {
  Split split;
  const int64_t windows = (n - 1) / seq_len;
  split.block_tokens =
      std::clamp<int64_t>(windows / kTargetBlocks, 1, kMaxBlockWindows) * seq_len + 1;
  split.blocks = (n + split.block_tokens - 1) / split.block_tokens;
  // Block b is held out when round(f * (b + 1)) steps past round(f * b): evenly spread, and
  // round(f * blocks) in all. A fraction too small for even one block still holds out one, in
  // the middle of the file.
  const auto rounded = [&](int64_t b) { return std::llround(fraction * static_cast<double>(b)); };
  const bool none = rounded(split.blocks) == 0;
  for (int64_t b = 0; b < split.blocks; ++b) {
    const int64_t begin = b * split.block_tokens;
    const int64_t count = std::min(split.block_tokens, n - begin);
    const bool held_out = none ? b == split.blocks / 2 : rounded(b + 1) > rounded(b);
    Append(held_out ? split.val : split.train, begin, count);
  }
  return split;
}

}  // namespace

Result<TokenDataset> TokenDataset::Open(const DataOptions& options) {
  SLUICE_RETURN_IF_ERROR(CheckOptions(options));
  TokenDataset ds;
  ds.options_ = options;
  const int64_t seq_len = options.seq_len;

  SLUICE_ASSIGN_OR_RETURN(TokenFile train,
                          TokenFile::Open(options.train_path, options.format, options.vocab_size));
  ds.train_file_ = std::make_unique<TokenFile>(std::move(train));
  const TokenFile& train_file = *ds.train_file_;
  SLUICE_RETURN_IF_ERROR(CheckLongEnough(train_file, seq_len, "data.train_path"));

  if (!options.val_path.empty()) {
    SLUICE_ASSIGN_OR_RETURN(TokenFile val,
                            TokenFile::Open(options.val_path, options.format, options.vocab_size));
    ds.val_file_ = std::make_unique<TokenFile>(std::move(val));
    SLUICE_RETURN_IF_ERROR(CheckLongEnough(*ds.val_file_, seq_len, "data.val_path"));
    ds.train_ = TokenRegion(train_file);
    ds.val_ = TokenRegion(*ds.val_file_);
    return ds;
  }
  if (options.val_fraction == 0.0) {
    ds.train_ = TokenRegion(train_file);
    return ds;
  }

  const int64_t n = train_file.num_tokens();
  Split split = Interleave(n, seq_len, options.val_fraction);
  const int64_t train_tokens = Total(split.train), val_tokens = Total(split.val);
  if (train_tokens < seq_len + 1 || val_tokens < seq_len + 1) {
    return InvalidArgumentError(
        "data.train_path '{}' holds {} tokens; holding out data.val_fraction {} of its {} blocks "
        "of {} tokens leaves {} training and {} validation tokens, and each part needs at least "
        "one window of model.seq_len + 1 = {} tokens; use a longer file, another val_fraction or "
        "a smaller seq_len, or set data.val_path",
        train_file.path(), n, options.val_fraction, split.blocks, split.block_tokens, train_tokens,
        val_tokens, seq_len + 1);
  }
  ds.train_ = TokenRegion(train_file, std::move(split.train));
  ds.val_ = TokenRegion(train_file, std::move(split.val));
  return ds;
}

}  // namespace sluice::data
