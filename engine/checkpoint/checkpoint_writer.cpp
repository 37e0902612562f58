#include "engine/checkpoint/checkpoint_writer.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <random>
#include <system_error>
#include <vector>

#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/shard_reader.h"
#include "engine/checkpoint/shard_writer.h"
#include "engine/checkpoint/tensor_index.h"
#include "runtime/durable_file.h"
#include "runtime/fault_point.h"
#include "runtime/foreign_call.h"
#include "runtime/logging.h"

namespace sluice::checkpoint {
namespace {

std::string RandomTag() {
  std::random_device device;
  return fmt::format("{:08x}", device());
}

void Progress(const SaveRequest& request, std::string_view point) {
  if (request.progress_hook) request.progress_hook(point);
}

// Runs one collective agreement; a rank that failed keeps its own error, the others learn that
// some rank failed.
Status Agree(const AgreeFn& agree, int world, const Status& local, std::string_view phase) {
  if (world == 1 || !agree) return local;
  Result<bool> all_ok = agree(local.ok());
  if (!all_ok.ok()) return std::move(all_ok).status().WithContext(phase);
  if (!local.ok()) return local;
  if (!*all_ok) {
    return FailedPreconditionError(
        "{}: another rank failed; the checkpoint was abandoned (see "
        "that rank's log)",
        phase);
  }
  return OkStatus();
}

// Removes what crashed saves left behind: staging directories and latest.tmp.
Status RemoveStaleStaging(const std::filesystem::path& dir) {
  std::error_code ec;
  std::vector<std::filesystem::path> stale;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (IsStagingName(it->path().filename().string())) stale.push_back(it->path());
  }
  if (ec) return IoError("listing {}: {}", dir.string(), ec.message());
  for (const auto& path : stale) {
    SLUICE_LOG(kInfo, "checkpoint", "removing {} left by an interrupted save", path.string());
    SLUICE_RETURN_IF_ERROR(RemoveTree(path));
  }
  return OkStatus();
}

Status Prepare(const SaveRequest& request, const std::filesystem::path& staging) {
  SLUICE_RETURN_IF_ERROR(CreateDirectories(request.checkpoints_dir).WithContext("checkpoint"));
  SLUICE_RETURN_IF_ERROR(RemoveStaleStaging(request.checkpoints_dir));
  std::error_code ec;
  if (!std::filesystem::create_directory(staging, ec) || ec) {
    return IoError("creating staging directory {}: {}", staging.string(),
                   ec ? ec.message() : "it already exists");
  }
  return OkStatus();
}

// Rank 0, after every rank's files are durable: checks them together and writes the manifest.
Status WriteManifest(const SaveRequest& request, const std::filesystem::path& staging) {
  SLUICE_RETURN_IF_ERROR(FsyncDirectory(staging));
  Manifest manifest;
  manifest.step = request.step;
  manifest.world_size = request.world;
  manifest.zero_stage = request.zero_stage;
  manifest.config = request.config;
  manifest.states = request.states;
  manifest.ranks.resize(request.world);
  for (int r = 0; r < request.world; ++r) manifest.ranks[r].rank = r;
  for (ShardGroup group : kAllShardGroups) {
    std::vector<std::unique_ptr<ShardFileReader>> files;
    std::vector<const ShardFileReader*> views;
    for (int r = 0; r < request.world; ++r) {
      const std::string name = ShardFileName(group, r);
      SLUICE_ASSIGN_OR_RETURN(auto file,
                              ShardFileReader::Open(staging / name, group, r, request.world));
      manifest.ranks[r].files[group] =
          ManifestFile{.path = name,
                       .bytes = file->header().data_offset + file->header().data_bytes,
                       .checksum = file->header().header_checksum};
      views.push_back(file.get());
      files.push_back(std::move(file));
    }
    SLUICE_ASSIGN_OR_RETURN(TensorIndex index, TensorIndex::Build(views));
    for (const TensorSlices& t : index.tensors()) manifest.tensors.push_back(t.tensor);
  }
  const std::string text = ManifestToJson(manifest).dump(2) + "\n";
  const std::filesystem::path path = staging / kManifestFileName;
  SLUICE_ASSIGN_OR_RETURN(ScopedFd fd, CreateExclusive(path));
  SLUICE_RETURN_IF_ERROR(WriteAt(fd.get(), text.data(), text.size(), 0, path));
  SLUICE_RETURN_IF_ERROR(FsyncFd(fd.get(), path));
  SLUICE_RETURN_IF_ERROR(fd.Close());
  return FsyncDirectory(staging);
}

// Moves the staging directory to its final name. An existing step_N (a save of the same step
// after a resume from an earlier one) is swapped out atomically with RENAME_EXCHANGE, so step_N
// is complete at every instant, then deleted under the staging name.
Status Publish(const std::filesystem::path& staging, const std::filesystem::path& final_dir) {
  std::error_code ec;
  if (std::filesystem::exists(final_dir, ec)) {
    SLUICE_TRY_SYS(
        ::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE));
    SLUICE_RETURN_IF_ERROR(FsyncDirectory(final_dir.parent_path()));
    return RemoveTree(staging);
  }
  SLUICE_TRY_SYS(
      ::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_NOREPLACE));
  return FsyncDirectory(final_dir.parent_path());
}

// Deletes committed checkpoint `step`: first renamed to a staging name, so a crash mid-delete
// leaves no half-deleted step_N behind.
Status RemoveCommitted(const std::filesystem::path& dir, int64_t step) {
  const std::filesystem::path from = dir / StepDirName(step);
  const std::filesystem::path doomed = dir / (StepDirName(step) + ".tmp-prune");
  SLUICE_RETURN_IF_ERROR(RemoveTree(doomed));
  SLUICE_TRY_SYS(::rename(from.c_str(), doomed.c_str()));
  SLUICE_RETURN_IF_ERROR(FsyncDirectory(dir));
  return RemoveTree(doomed);
}

// Deletes committed checkpoints beyond the newest `keep_last` (never `keep_step`).
Status Prune(const std::filesystem::path& dir, int keep_last, int64_t keep_step) {
  if (keep_last <= 0) return OkStatus();
  SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCommittedSteps(dir));
  std::sort(steps.rbegin(), steps.rend());
  int kept = 0;
  for (int64_t step : steps) {
    if (step == keep_step || kept < keep_last) {
      ++kept;
      continue;
    }
    SLUICE_RETURN_IF_ERROR(RemoveCommitted(dir, step));
  }
  return OkStatus();
}

Status Commit(const SaveRequest& request, const std::filesystem::path& staging) {
  SLUICE_RETURN_IF_ERROR(WriteManifest(request, staging));
  Progress(request, "manifest_written");
  const std::filesystem::path final_dir = request.checkpoints_dir / StepDirName(request.step);
  SLUICE_RETURN_IF_ERROR(Publish(staging, final_dir));
  Progress(request, "renamed");
  SLUICE_RETURN_IF_ERROR(WriteFileAtomically(request.checkpoints_dir / kLatestFileName,
                                             StepDirName(request.step) + "\n"));
  Progress(request, "latest_updated");
  SLUICE_RETURN_IF_ERROR(Prune(request.checkpoints_dir, request.keep_last, request.step));
  Progress(request, "pruned");
  return OkStatus();
}

}  // namespace

Status RemoveAllCheckpoints(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return OkStatus();
  const std::filesystem::path latest = dir / kLatestFileName;
  if (::unlink(latest.c_str()) != 0 && errno != ENOENT) {
    return IoError("removing {}: {}", latest.string(), internal::ErrnoText(errno));
  }
  SLUICE_RETURN_IF_ERROR(FsyncDirectory(dir));
  SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCommittedSteps(dir));
  for (int64_t step : steps) SLUICE_RETURN_IF_ERROR(RemoveCommitted(dir, step));
  return RemoveStaleStaging(dir);
}

Result<std::filesystem::path> SaveCheckpoint(const SaveRequest& request,
                                             std::span<const ShardTensor> tensors,
                                             const AgreeFn& agree) {
  return SaveCheckpointStreamed(
      request,
      [&request, tensors](const std::filesystem::path& staging) {
        return WriteRankShardFiles(staging, request.rank, request.world, tensors,
                                   request.checksum_block_bytes, request.io);
      },
      agree);
}

Result<std::filesystem::path> SaveCheckpointStreamed(const SaveRequest& request,
                                                     const RankFilesWriter& write_files,
                                                     const AgreeFn& agree) {
  SLUICE_CHECK(request.world >= 1 && request.rank >= 0 && request.rank < request.world)
      << "rank " << request.rank << " of world " << request.world;
  SLUICE_CHECK(request.world == 1 || agree) << "SaveCheckpoint with world > 1 needs `agree`";
  if (request.step < 0) return InvalidArgumentError("checkpoint step {} is negative", request.step);
  if (request.world > 1 && request.attempt_tag.empty()) {
    return InvalidArgumentError(
        "SaveCheckpoint with world {}: attempt_tag must be set (the same "
        "on every rank)",
        request.world);
  }
  const std::string tag = request.attempt_tag.empty() ? RandomTag() : request.attempt_tag;
  if (tag.find('/') != std::string::npos) {
    return InvalidArgumentError("checkpoint attempt_tag '{}' contains '/'", tag);
  }
  const std::filesystem::path staging =
      request.checkpoints_dir / fmt::format("{}.tmp-{}", StepDirName(request.step), tag);
  const std::string where =
      fmt::format("saving checkpoint step {} (rank {} of {}) in {}", request.step, request.rank,
                  request.world, request.checkpoints_dir.string());

  Status prepared = request.rank == 0 ? Prepare(request, staging) : OkStatus();
  SLUICE_RETURN_IF_ERROR(Agree(agree, request.world, prepared, "preparing").WithContext(where));

  Status written = write_files(staging);
  FaultPoint("checkpoint.rank_files_written", request.rank);
  Status all_written = Agree(agree, request.world, written, "writing shard files");
  if (!all_written.ok()) {
    if (request.rank == 0) (void)RemoveTree(staging);
    return std::move(all_written).WithContext(where);
  }
  if (request.rank == 0) Progress(request, "files_written");

  Status committed = request.rank == 0 ? Commit(request, staging) : OkStatus();
  if (!committed.ok() && request.rank == 0) {
    SLUICE_LOG(kError, "checkpoint", "{}: {}", where, committed.ToString());
  }
  SLUICE_RETURN_IF_ERROR(Agree(agree, request.world, committed, "committing").WithContext(where));
  return request.checkpoints_dir / StepDirName(request.step);
}

}  // namespace sluice::checkpoint
