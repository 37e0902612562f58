// The files a training run writes into its run directory: whole files (config.resolved.json,
// summary.json) are replaced atomically (temporary file, rename), so a reader never sees half of
// one; metrics.jsonl grows by whole lines (metrics_writer.h). These are records, not checkpoints:
// they are not fsync'ed, which costs seconds on a busy disk.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "engine/config/config.h"
#include "runtime/durable_file.h"
#include "runtime/status.h"

namespace sluice::train {

// Creates `dir` and its missing parents. IoError naming the directory and the errno text.
Status CreateRunDirectory(const std::string& dir);

// Removes `path` if it exists (a previous run's record in a reused run directory: a new run must
// not leave it looking like its own; and replacing an existing file by rename, or truncating
// it, makes ext4 flush it (auto_da_alloc), which costs seconds on a busy disk).
Status RemoveStaleFile(const std::string& path);

// What a run is about to do with its run directory (Trainer options).
struct RunDirectoryClaim {
  bool write_files = true;            // config.resolved.json, metrics.jsonl, summary.json
  std::optional<std::string> resume;  // --resume: "latest" or a checkpoint path
  bool overwrite = false;             // --overwrite
};

// Rank 0, before anything in run.dir or the checkpoints directory is written or pruned. A run
// that would start a new history there (a fresh run, or one resumed from a checkpoint outside
// its own checkpoints directory) while that directory holds another run's committed
// checkpoints is refused: FailedPrecondition naming both directories and the newest step, and
// what to do (--resume, another --run-dir, --overwrite). It would replace that run's metrics and
// prune its checkpoints by step number. With `overwrite` the old checkpoints are deleted
// (RemoveAllCheckpoints), unless model.init_from or the resumed checkpoint lies among them. A
// fresh run into a directory whose metrics.jsonl holds records but no checkpoint continues that
// run replaces the file and says so (a warning naming it). Nothing to check for a run that
// writes no files and saves no checkpoints.
Status ClaimRunDirectory(const Config& config, const RunDirectoryClaim& claim);

// Whole record files: WriteFileAtomically(path, text, Durability::kUnsynced)
// (runtime/durable_file.h).

}  // namespace sluice::train
