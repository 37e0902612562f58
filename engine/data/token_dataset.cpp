#include "engine/data/token_dataset.h"

#include <algorithm>
#include <cmath>
#include <utility>

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

TokenRegion WholeFile(const TokenFile& file) { return TokenRegion{&file, 0, file.tokens()}; }

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
    ds.train_ = WholeFile(train_file);
    ds.val_ = WholeFile(*ds.val_file_);
    return ds;
  }
  if (options.val_fraction == 0.0) {
    ds.train_ = WholeFile(train_file);
    return ds;
  }

  // Hold out the last V windows (V * seq_len + 1 tokens) for validation; training keeps the
  // tokens before them, so the two never share a token.
  const int64_t n = train_file.num_tokens();
  const int64_t windows = (n - 1) / seq_len;
  const int64_t val_windows =
      std::max<int64_t>(1, std::llround(options.val_fraction * static_cast<double>(windows)));
  const int64_t val_tokens = val_windows * seq_len + 1;
  const int64_t train_tokens = n - val_tokens;
  if (train_tokens < seq_len + 1) {
    return InvalidArgumentError(
        "data.train_path '{}' holds {} tokens = {} windows of model.seq_len + 1 = {}; holding out "
        "data.val_fraction {} ({} windows, {} tokens) leaves {} tokens, less than one training "
        "window; use a longer file, a smaller seq_len or val_fraction, or set data.val_path",
        train_file.path(), n, windows, seq_len + 1, options.val_fraction, val_windows, val_tokens,
        train_tokens);
  }
  ds.train_ = TokenRegion{&train_file, 0, train_file.tokens().Slice(0, train_tokens)};
  ds.val_ =
      TokenRegion{&train_file, train_tokens, train_file.tokens().Slice(train_tokens, val_tokens)};
  return ds;
}

}  // namespace sluice::data
