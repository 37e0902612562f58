// `sluice train --dry-run`: everything a run checks before it trains, without training and
// without writing anything. The config is resolved for the world size (the launcher's, or
// --ranks), the batch fitted to it, the memory estimated and checked against the budgets, the
// model built on paper, the schedule created, the data opened read-only (validated, not read
// beyond that), the run directory and model.init_from looked at; then the plan is printed:
// ranks, ZeRO stage and offload, batch, steps and tokens, and memory per device and tier.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "engine/config/config.h"
#include "runtime/status.h"

namespace sluice::cli {

struct DryRunRequest {
  ConfigSources sources;  // world_size: the ranks to plan for
  int rank = 0;           // this process's (the plan is printed by rank 0 only)
  std::string ranks_source = "this process alone";  // "mpirun", "srun", "--ranks"
  std::optional<std::string> resume;
  bool overwrite = false;
};

// The first failed check's error (with the key to change), or OK after printing the plan to
// `out`.
Status RunTrainDryRun(const DryRunRequest& request, std::FILE* out);

// For `sluice train --dry-run [--ranks N]`: the world is N ranks when given, else the one the
// launcher describes (rank_placement.h: mpirun's or srun's variables), else 1; prints to stdout.
Status DryRunTrain(ConfigSources sources, int ranks, std::optional<std::string> resume,
                   bool overwrite);

}  // namespace sluice::cli
