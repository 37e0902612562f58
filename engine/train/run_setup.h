// From a resolved Config to the pieces a training run is built of: the config itself (with the
// model section optionally taken from a separate file, so a plain DeepSpeed ds_config.json can
// be used as it is), the model's options and the data pipeline's options.
#pragma once

#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/data/data_options.h"
#include "engine/model/model_options.h"
#include "engine/train/precision.h"
#include "runtime/status.h"

namespace sluice::train {

struct TrainConfigSources {
  std::string config_path;  // the config file (YAML or JSON, DeepSpeed keys)
  // Optional: a file holding the model section, either as a top-level `model:` map or as the
  // map itself (`family: gpt2`, `n_layer: 4`, ...). It replaces the config file's model section.
  std::string model_path;
  std::vector<std::string> set_overrides;  // "key=value", applied last
  // Environment as NAME=VALUE pairs; nullopt reads the process environment (SLUICE_CFG_*).
  std::optional<std::vector<std::pair<std::string, std::string>>> env;
};

// Loads, merges and resolves the config (LoadConfigFromTree), then checks what training needs:
// a model section (InvalidArgument naming both ways to give one) and data.train_path.
Result<Config> LoadTrainConfig(const TrainConfigSources& sources);

// The model the config describes, storing parameters as `precision` requires, computing with
// device.threads threads. InvalidArgument from ValidateModelOptions names the model.* key.
Result<model::ModelOptions> ModelOptionsFromConfig(const Config& config, Precision precision);

data::DataOptions DataOptionsFromConfig(const Config& config);

// "gpt2, n_layer 4, n_head 4, d_model 256, d_ff 1024, seq_len 128"
std::string DescribeModel(const model::ModelOptions& options);

}  // namespace sluice::train
