// What the data pipeline needs to know; the engine fills it from the `data` and `model` config
// sections (data.train_path, data.val_path, data.format, model.seq_len, data.val_fraction,
// data.seed, model.vocab_size).
#pragma once

#include <cstdint>
#include <string>

#include "engine/data/token_format.h"

namespace sluice::data {

struct DataOptions {
  std::string train_path;
  // Empty: validation is val_fraction of train_path, held out in evenly spaced blocks.
  std::string val_path;
  TokenFormat format = TokenFormat::kAuto;  // applied to both files, each detected on its own
  int64_t seq_len = 0;
  double val_fraction = 0.1;  // ignored when val_path is set; 0 = no validation
  uint64_t seed = 1234;
  int64_t vocab_size = 256;
};

}  // namespace sluice::data
