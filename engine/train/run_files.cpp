#include "engine/train/run_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/checkpoint/checkpoint_writer.h"
#include "engine/train/checkpointing.h"
#include "runtime/durable_file.h"
#include "runtime/foreign_call.h"
#include "runtime/logging.h"

namespace sluice::train {
namespace {

namespace fs = std::filesystem;

fs::path Resolved(const fs::path& path) {
  std::error_code ec;
  fs::path resolved = fs::weakly_canonical(path, ec);
  return ec ? fs::absolute(path, ec).lexically_normal() : resolved;
}

// Whether `path` is `dir` or lies under it.
bool Inside(const fs::path& path, const fs::path& dir) {
  const fs::path p = Resolved(path);
  const fs::path d = Resolved(dir);
  auto d_it = d.begin();
  for (auto p_it = p.begin(); d_it != d.end() && p_it != p.end(); ++d_it, ++p_it) {
    if (d_it->empty()) break;  // a trailing separator
    if (*d_it != *p_it) return false;
  }
  return d_it == d.end() || d_it->empty();
}

// Lines of `path` that hold something; 0 when it does not exist.
int64_t CountRecords(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  int64_t records = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) ++records;
  }
  return records;
}

}  // namespace

Status CreateRunDirectory(const std::string& dir) {
  return CreateDirectories(dir, "choose another run directory with --run-dir or run.dir");
}

Status RemoveStaleFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return IoError("cannot remove the stale {}: {}", path, internal::ErrnoText(errno));
  }
  return OkStatus();
}

Status ClaimRunDirectory(const Config& config, const RunDirectoryClaim& claim) {
  if (!claim.write_files && config.checkpoint.save_interval <= 0) return OkStatus();
  const fs::path run_dir(config.run.dir);
  const fs::path checkpoints = CheckpointsDirOf(config);
  std::optional<fs::path> resumed_from;  // a checkpoint outside `checkpoints`
  if (claim.resume.has_value()) {
    Result<fs::path> dir = ResolveResumeDir(config, *claim.resume);
    // Continuing this directory's own run; a checkpoint that cannot be resolved is the resume's
    // error to report.
    if (!dir.ok() || Inside(*dir, checkpoints)) return OkStatus();
    resumed_from = *dir;
  }
  std::vector<int64_t> steps;
  std::error_code ec;
  if (fs::is_directory(checkpoints, ec)) {
    SLUICE_ASSIGN_OR_RETURN(steps, checkpoint::ListCommittedSteps(checkpoints));
  }
  const bool has_latest = fs::exists(checkpoints / checkpoint::kLatestFileName, ec);
  if (steps.empty() && !has_latest) {
    const fs::path metrics = run_dir / "metrics.jsonl";
    const int64_t records = claim.write_files && !resumed_from ? CountRecords(metrics) : 0;
    if (records > 0 && !claim.overwrite) {
      SLUICE_LOG(kWarn, "train",
                 "run directory {}: replacing {} of an earlier run ({} records; it saved no "
                 "checkpoint to continue from)",
                 run_dir.string(), metrics.string(), records);
    }
    return OkStatus();
  }
  const std::string newest =
      steps.empty() ? "a `latest` file" : fmt::format("checkpoints up to step {}", steps.back());
  const std::string what =
      resumed_from ? fmt::format("a run resumed from {}", resumed_from->string()) : "a fresh run";
  if (!claim.overwrite) {
    return FailedPreconditionError(
        "run directory {} holds another run ({} in {}): {} would replace its metrics and prune "
        "its checkpoints. Continue that run with --resume, give this run another --run-dir, or "
        "pass --overwrite to delete them and start over",
        run_dir.string(), newest, checkpoints.string(), what);
  }
  if (config.model.init_from.has_value() && !resumed_from &&
      Inside(*config.model.init_from, checkpoints)) {
    return FailedPreconditionError(
        "--overwrite would delete the checkpoints in {} that model.init_from ({}) loads: copy "
        "the checkpoint elsewhere first, or give this run another --run-dir",
        checkpoints.string(), *config.model.init_from);
  }
  SLUICE_LOG(kWarn, "train", "--overwrite: deleting the previous run's {} in {}", newest,
             checkpoints.string());
  SLUICE_RETURN_IF_ERROR(checkpoint::RemoveAllCheckpoints(checkpoints));
  // A resumed run keeps metrics.jsonl up to its step: not the previous run's.
  if (resumed_from) SLUICE_RETURN_IF_ERROR(RemoveStaleFile((run_dir / "metrics.jsonl").string()));
  return OkStatus();
}

}  // namespace sluice::train
