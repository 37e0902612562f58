// From a resolved Config to the pieces a training run is built of: the config itself (layered
// files, the model section optionally from a --model file, so a plain DeepSpeed ds_config.json
// can be used as it is), the model's options and the data pipeline's options.
#pragma once

#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/data/data_options.h"
#include "engine/model/model_options.h"
#include "engine/train/precision.h"
#include "runtime/status.h"

namespace sluice::train {

// Loads the layered config (LoadConfig: the --config files in order, then the --model file),
// then checks what training needs beyond a valid config: a model section (InvalidArgument
// naming both ways to give one) and data.train_path.
Result<Config> LoadTrainConfig(const ConfigSources& sources);
// The training checks alone, for a config loaded otherwise.
Status CheckTrainable(const Config& config);

// The model the config describes, storing parameters as `precision` requires, computing with
// device.threads threads, checkpointing blocks as model.activation_checkpointing and the
// activation_checkpointing section say. InvalidArgument from ValidateModelOptions names the key.
Result<model::ModelOptions> ModelOptionsFromConfig(const Config& config, Precision precision);
// The registry's defaults (Config(), f32): where code that builds a model without a config file
// starts.
model::ModelOptions DefaultModelOptions();

data::DataOptions DataOptionsFromConfig(const Config& config);
// The registry's defaults (Config()): where code that opens data without a config file starts.
data::DataOptions DefaultDataOptions();

// "gpt2, n_layer 4, n_head 4, d_model 256, d_ff 1024, seq_len 128", then, with checkpointing,
// ", activation checkpointing of 2 of 4 blocks (inputs in host memory)"
std::string DescribeModel(const model::ModelOptions& options);

}  // namespace sluice::train
