// What the data pipeline needs to know; the engine fills it from the `data` and `model` config
// sections (data.train_path, data.val_path, data.format, model.seq_len, data.val_fraction,
// data.seed, model.vocab_size).
#pragma once

#include <cstdint>
#include <string>

#include "engine/data/token_format.h"

namespace sluice::data {

// The fields hold no defaults: each is a setting (data.*, model.seq_len, model.vocab_size) whose
// default the settings registry declares. Built from a config by train::DataOptionsFromConfig,
// from the registry's defaults by train::DefaultDataOptions; made on its own it is blank.
struct DataOptions {
  std::string train_path;
  // Empty: validation is val_fraction of train_path, held out in evenly spaced blocks.
  std::string val_path;
  TokenFormat format{};  // applied to both files, each detected on its own
  int64_t seq_len{};
  double val_fraction{};  // ignored when val_path is set; 0 = no validation
  uint64_t seed{};
  int64_t vocab_size{};
};

}  // namespace sluice::data
