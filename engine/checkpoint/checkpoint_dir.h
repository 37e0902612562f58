// Names inside RUN_DIR/checkpoints/: committed step directories (step_N), staging directories of
// saves in progress or crashed (step_N.tmp-TAG), and the `latest` pointer file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace sluice::checkpoint {

inline constexpr std::string_view kLatestFileName = "latest";

std::string StepDirName(int64_t step);  // "step_120"
// The step of a committed directory name ("step_120" -> 120); nullopt for anything else,
// staging directories included.
std::optional<int64_t> ParseStepDirName(std::string_view name);
// Leftovers of an interrupted save: "step_7.tmp-1a2b", "latest.tmp".
bool IsStagingName(std::string_view name);

// The step `latest` names; nullopt when there is no `latest` yet. DataLoss when it is unreadable
// or names no step directory.
Result<std::optional<int64_t>> ReadLatestStep(const std::filesystem::path& checkpoints_dir);
// Committed step directories, ascending.
Result<std::vector<int64_t>> ListCommittedSteps(const std::filesystem::path& checkpoints_dir);

// A step directory from what a user typed: a step directory itself (has manifest.json), a
// checkpoints directory (follows `latest`), or a run directory (follows checkpoints/latest).
Result<std::filesystem::path> ResolveCheckpointDir(const std::filesystem::path& path);

}  // namespace sluice::checkpoint
