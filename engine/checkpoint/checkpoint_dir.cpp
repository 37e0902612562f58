#include "engine/checkpoint/checkpoint_dir.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <system_error>

#include "engine/checkpoint/manifest.h"
#include "runtime/durable_file.h"

namespace sluice::checkpoint {

std::string StepDirName(int64_t step) { return fmt::format("step_{}", step); }

std::optional<int64_t> ParseStepDirName(std::string_view name) {
  constexpr std::string_view kPrefix = "step_";
  if (!name.starts_with(kPrefix) || name.size() == kPrefix.size() || name.size() > 24) {
    return std::nullopt;
  }
  std::string_view digits = name.substr(kPrefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  int64_t step = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return std::nullopt;
  return step;
}

bool IsStagingName(std::string_view name) {
  return name.find(".tmp-") != std::string_view::npos || name == "latest.tmp";
}

Result<std::optional<int64_t>> ReadLatestStep(const std::filesystem::path& checkpoints_dir) {
  const std::filesystem::path path = checkpoints_dir / kLatestFileName;
  Result<std::string> text = ReadWholeFile(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return std::optional<int64_t>();
    return text.status();
  }
  std::string_view name = *text;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.remove_suffix(1);
  std::optional<int64_t> step = ParseStepDirName(name);
  if (!step) {
    return DataLossError("{}: '{}' does not name a step directory (step_N)", path.string(), name);
  }
  return step;
}

Result<std::vector<int64_t>> ListCommittedSteps(const std::filesystem::path& checkpoints_dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(checkpoints_dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    if (auto step = ParseStepDirName(it->path().filename().string())) steps.push_back(*step);
  }
  if (ec) return IoError("listing {}: {}", checkpoints_dir.string(), ec.message());
  std::sort(steps.begin(), steps.end());
  return steps;
}

Result<std::filesystem::path> ResolveCheckpointDir(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::exists(path / kManifestFileName, ec)) return path;
  for (const std::filesystem::path& dir : {path, path / "checkpoints"}) {
    if (!std::filesystem::exists(dir / kLatestFileName, ec)) continue;
    SLUICE_ASSIGN_OR_RETURN(std::optional<int64_t> step, ReadLatestStep(dir));
    const std::filesystem::path step_dir = dir / StepDirName(*step);
    if (!std::filesystem::exists(step_dir / kManifestFileName, ec)) {
      return DataLossError(
          "{} names {} but {} does not exist: the checkpoint directory was "
          "changed outside Sluice",
          (dir / kLatestFileName).string(), StepDirName(*step),
          (step_dir / kManifestFileName).string());
    }
    return step_dir;
  }
  if (!std::filesystem::exists(path, ec)) {
    return NotFoundError("checkpoint {} does not exist", path.string());
  }
  return NotFoundError(
      "{} is not a checkpoint: expected a step directory with {}, a checkpoints directory with "
      "'{}', or a run directory with checkpoints/{}",
      path.string(), kManifestFileName, kLatestFileName, kLatestFileName);
}

}  // namespace sluice::checkpoint
