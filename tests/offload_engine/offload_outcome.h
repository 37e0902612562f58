// What the offload engine tests compare: a short training run of the ZeRO engine (losses,
// gradient norms, final parameters), where its state ended up (memory by tier, the NVMe
// parameter store's counters, the offloaded fraction of the optimizer) and the exported optimizer
// state. Two runs that must be bitwise equal are checked with ExpectSameTraining.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/zero/zero_engine.h"
#include "offload/nvme_param_store.h"
#include "tests/zero/zero_test_util.h"

namespace sluice::zero::testing {

struct OffloadOutcome {
  RunResult run;
  ZeroMemory memory;
  offload::NvmeParamStoreStats param_store;  // offload_param nvme
  double offloaded = 0;                      // the engine optimizer's offload_ratio()
  std::vector<float> master, exp_avg, exp_avg_sq;
  int64_t step = 0;
};

// `steps` steps on this world, gradient clipping at 1.
TrainSettings OffloadTrainSettings(DType dtype, int64_t steps = 4);

// Runs `settings` on `rig` and records the outcome (CHECK-fails on an error).
OffloadOutcome FinishOffloadRun(ZeroRig& rig, const TrainSettings& settings);

// A fresh engine of `options` on TinyGpt, trained with `settings` (seeded by settings.seed).
OffloadOutcome TrainOffload(const ZeroOptions& options, const TrainSettings& settings);

// TrainOffload with OffloadTrainSettings(dtype).
OffloadOutcome TrainOffload(const ZeroOptions& options, DType dtype);

// TrainOffload of everything on the device (offload none) for `options`' stage and sizes, run
// once per (stage, dtype, sub_group_size) in this process: the baseline offloaded runs compare
// against.
const OffloadOutcome& DeviceBaseline(const ZeroOptions& options, DType dtype);

// One engine's whole state shard, exported, and readers that serve it to ImportState of an
// engine with the same layout (same model and world; any optimizer tier or ratio).
struct ExportedState {
  std::vector<ZeroStateRange> ranges;
  std::vector<float> master, exp_avg, exp_avg_sq;
  int64_t step = 0;

  // Valid while this object lives.
  ZeroStateReaders Readers() const;
};
Result<ExportedState> ExportEngineState(const ZeroEngine& engine);

// After `imported` took the state `device` exported at `saved_step` (ImportState, as a checkpoint
// restore does): publishes its parameters, checks its step, then runs `settings` on both and
// expects the same losses and parameters to the bit.
void ExpectImportContinuesBitwise(ZeroRig& device, ZeroRig& imported, int64_t saved_step,
                                  const TrainSettings& settings);

// Losses, gradient norms, parameters and the whole optimizer state, to the bit.
void ExpectSameTraining(const OffloadOutcome& a, const OffloadOutcome& b, const std::string& what);

}  // namespace sluice::zero::testing
