// Cross-field checks of the training progress a checkpoint's manifest records ("states", written
// by engine/train/checkpointing.cpp), against itself and the manifest's step. They hold whatever
// the config, world size or stage, so a progress field that was changed without the others is
// refused naming it even in a version 1 manifest, which has no checksums:
//   states.step == step;
//   0 <= states.optimizer.step (applied steps) <= step (skipped steps included);
//   states.lr_schedule.last_batch_iteration == start + states.optimizer.step, the schedule
//     advancing once per applied step from `start`, the checkpoint config's
//     scheduler.params.last_batch_iteration (-1 when unset);
//   states.data_loader: epoch >= 0 and 0 <= position <= the windows of that epoch;
//   states.total_tokens == the windows drawn before (epoch, position) x seq_len: each step draws
//     its global batch of windows and counts seq_len tokens for each.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/manifest.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

struct RecordedProgress {
  int64_t step = 0;
  int64_t total_tokens = 0;
  int64_t optimizer_step = 0;
  int64_t lr_last_batch_iteration = -1;
  nlohmann::json data_loader = nlohmann::json::object();  // DataLoader::SaveState
};

// DataLoss naming the manifest (in `step_dir`) and the field that disagrees.
Status CheckRecordedProgress(const RecordedProgress& progress, const Manifest& manifest,
                             const std::filesystem::path& step_dir);

}  // namespace sluice::checkpoint
