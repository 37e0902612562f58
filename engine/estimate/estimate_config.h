// The config `sluice estimate` reads: one config file (YAML or JSON; a DeepSpeed ds_config.json
// works as it is) and, optionally, a --model file with the model section, resolved for the
// world size being estimated (DeepSpeed's batch-size inference depends on it).
//
// The --model file is either a `model:` map on its own (`family: gpt2`, `n_layer: 4`, ...) or a
// document with a top-level `model:` section and, beside it, any of Sluice's other sections
// (`data`, `device`, `run`). Its sections are merged key by key over the config file's: a value
// in the --model file wins.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/config.h"
#include "runtime/status.h"

namespace sluice::estimate {

struct EstimateConfigSources {
  std::string config_path;                 // required
  std::string model_path;                  // optional
  std::vector<std::string> set_overrides;  // "key=value", applied last
  int world_size = 1;
  // Environment as NAME=VALUE pairs; nullopt reads the process environment (SLUICE_CFG_*).
  std::optional<std::vector<std::pair<std::string, std::string>>> env;
};

Result<Config> LoadEstimateConfig(const EstimateConfigSources& sources);

}  // namespace sluice::estimate
