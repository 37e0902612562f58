// The files a training run writes into its run directory: whole files (config.resolved.json,
// summary.json) are replaced atomically (temporary file, rename), so a reader never sees half of
// one; metrics.jsonl grows by whole lines (metrics_writer.h). These are records, not checkpoints:
// they are not fsync'ed, which costs seconds on a busy disk.
#pragma once

#include <string>
#include <string_view>

#include "runtime/durable_file.h"
#include "runtime/status.h"

namespace sluice::train {

// Creates `dir` and its missing parents. IoError naming the directory and the errno text.
Status CreateRunDirectory(const std::string& dir);

// Removes `path` if it exists (a previous run's record in a reused run directory: a new run must
// not leave it looking like its own; and replacing an existing file by rename, or truncating
// it, makes ext4 flush it (auto_da_alloc), which costs seconds on a busy disk).
Status RemoveStaleFile(const std::string& path);

// Whole record files: WriteFileAtomically(path, text, Durability::kUnsynced)
// (runtime/durable_file.h).

}  // namespace sluice::train
