// The training and validation token streams of a run: one or two mapped files, with the split
// applied. Validation is either a file of its own or the tail of the training file, cut so that
// the two parts share no token: no window crosses the split.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/data/data_options.h"
#include "engine/data/token_file.h"
#include "engine/data/token_view.h"
#include "runtime/status.h"

namespace sluice::data {

// A contiguous stretch of one file's tokens.
struct TokenRegion {
  const TokenFile* file = nullptr;
  int64_t begin = 0;  // index of the region's first token in the file
  TokenView tokens;

  int64_t size() const { return tokens.size(); }
  // Number of non-overlapping windows of seq_len + 1 tokens at stride seq_len from the start.
  int64_t NumWindows(int64_t seq_len) const {
    return tokens.size() > seq_len ? (tokens.size() - 1) / seq_len : 0;
  }
};

class TokenDataset {
 public:
  // Opens and validates both files and applies the split. Errors name the option (data.* or
  // model.* key), the file and what to change.
  static Result<TokenDataset> Open(const DataOptions& options);

  const DataOptions& options() const { return options_; }
  const TokenRegion& train() const { return train_; }
  // Empty (no file) when there is no validation data: no val_path and val_fraction 0.
  const TokenRegion& val() const { return val_; }
  bool has_val() const { return val_.file != nullptr; }

 private:
  DataOptions options_;
  std::unique_ptr<TokenFile> train_file_;
  std::unique_ptr<TokenFile> val_file_;  // only with val_path
  TokenRegion train_;
  TokenRegion val_;
};

}  // namespace sluice::data
