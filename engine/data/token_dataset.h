// The training and validation token streams of a run: one or two mapped files, with the split
// applied. Validation is either a file of its own or blocks held out of the training file at
// even intervals (so it samples the whole corpus, not just its last documents); the two parts
// share no token.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/data/data_options.h"
#include "engine/data/token_file.h"
#include "engine/data/token_region.h"
#include "runtime/status.h"

namespace sluice::data {

class TokenDataset {
 public:
  // Opens and validates both files and applies the split. Errors name the option (data.* or
  // model.* key), the file and what to change.
  static Result<TokenDataset> Open(const DataOptions& options);

  const DataOptions& options() const { return options_; }
  const TokenRegion& train() const { return train_; }
  // Empty (no file) when there is no validation data: no val_path and val_fraction 0.
  const TokenRegion& val() const { return val_; }
  bool has_val() const { return val_.file() != nullptr; }

 private:
  DataOptions options_;
  std::unique_ptr<TokenFile> train_file_;
  std::unique_ptr<TokenFile> val_file_;  // only with val_path
  TokenRegion train_;
  TokenRegion val_;
};

}  // namespace sluice::data
