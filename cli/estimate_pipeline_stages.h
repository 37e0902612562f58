// `sluice estimate` of a config with pipeline.stages (or tensor_parallel.autotp_size) above 1.
// The estimate takes the key out of every config layer (files,
// --model, SLUICE_CFG_* environment, --set), keeps its last value, and loads the rest as a
// one-stage config whose world is the data-parallel group (ranks / stages), the size the batch
// keys count (DeepSpeed's train_batch_size = micro x accumulation x dp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/config/config_layers.h"
#include "runtime/status.h"

namespace sluice::cli {

struct PipelineStagesSetting {
  int stages = 1;      // 1 when no layer gives it (or gives "auto")
  std::string origin;  // "run.yaml:4:11", "--set pipeline.stages=4", "SLUICE_CFG_..."; "" if none
};

// Removes pipeline.stages from `layers`, `env` and `set_overrides` and returns the value the
// last of them gave (--set over environment over files, later over earlier). InvalidArgument
// naming the origin for a value that is not a whole number from 1 or "auto".
Result<PipelineStagesSetting> TakePipelineStages(
    std::vector<ConfigLayer>* layers, std::vector<std::pair<std::string, std::string>>* env,
    std::vector<std::string>* set_overrides);

// The same for tensor_parallel.autotp_size, so that the estimate of a tensor-parallel config
// loads whatever the loader allows of it and applies the size itself: `stages` is the tensor
// size (0 or 1 given, or none: 1). InvalidArgument naming the origin for a value that is not a
// whole number from 0.
Result<PipelineStagesSetting> TakeTensorParallelSize(
    std::vector<ConfigLayer>* layers, std::vector<std::pair<std::string, std::string>>* env,
    std::vector<std::string>* set_overrides);

}  // namespace sluice::cli
