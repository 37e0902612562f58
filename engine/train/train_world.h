// The ranks a training run spans: the MPI world (a world of one when the process was not started
// by mpirun: MPI's singleton initialisation, about 0.3 s here), the batch keys checked against
// its size, and the two small collectives the trainer needs besides the ZeRO engine's: agreeing
// that every rank got past a set-up phase, and the maximum of per-rank counters.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/config/config.h"
#include "runtime/comm.h"
#include "runtime/status.h"

namespace sluice::train {

// The MPI world with run.comm_timeout. Collective.
Result<std::unique_ptr<Comm>> CreateTrainWorld(const Config& config);

// Makes the config's batch keys describe `world_size` ranks. A config resolved for that world
// size is left alone. One resolved for another (the loader assumed one rank) keeps its micro
// batch and accumulation per rank, and its train_batch_size (over the data-parallel ranks),
// world_size and dp_world_size are re-derived (so config.resolved.json records the real run),
// unless train_batch_size was given: then the micro batch or the accumulation would have been
// derived from the wrong world size, and InvalidArgument says which keys to give instead.
Status FitBatchToWorld(Config& config, int world_size);

// Collective: every rank passes how its part of `phase` went. OK when every rank succeeded;
// otherwise this rank's own error, or, on a rank that succeeded, FailedPrecondition naming the
// ranks that failed (their errors are printed by them). Keeps the healthy ranks from waiting in
// the next collective until run.comm_timeout.
Status AgreeAcrossRanks(Comm& world, const Status& mine, std::string_view phase);

// Element-wise maximum over the ranks of `mine` (the same length on every rank). Collective.
Result<std::vector<uint64_t>> MaxAcrossRanks(Comm& world, std::span<const uint64_t> mine);

}  // namespace sluice::train
