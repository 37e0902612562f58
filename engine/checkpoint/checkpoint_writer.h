// Saving a sharded checkpoint atomically (docs/checkpoint_format.md).
//
//   checkpoint::SaveRequest request;
//   request.checkpoints_dir = run_dir / "checkpoints";
//   request.step = step;
//   request.rank = comm.rank();
//   request.world = comm.size();
//   request.zero_stage = 3;
//   SLUICE_ASSIGN_OR_RETURN(request.attempt_tag, checkpoint::AgreeOnAttemptTag(comm));
//   request.keep_last = 3;
//   request.io = AioShardFileIo(engine.tiers());  // the rank's I/O engine writes the shard files
//   request.config = ConfigRecordJson(config);
//   request.states = {{"rng", ...}, {"data_loader", ...}, {"loss_scaler", ...}};
//   std::vector<checkpoint::ShardTensor> tensors = ...;  // master, exp_avg, exp_avg_sq ranges
//   SLUICE_ASSIGN_OR_RETURN(auto dir, checkpoint::SaveCheckpoint(
//                                         request, tensors, checkpoint::CommAgreeFn(comm)));
//   // or, streaming the data from where it lives (shard_stream_writer.h):
//   SLUICE_ASSIGN_OR_RETURN(auto dir, checkpoint::SaveCheckpointStreamed(
//                                         request, write_rank_files,
//                                         checkpoint::CommAgreeFn(comm)));
//
// Sequence: rank 0 removes leftovers of crashed saves and creates step_N.tmp-TAG/; every rank
// writes and fsyncs its weights and optimizer files there; rank 0 checks all ranks' files (the
// tensors must agree and be covered exactly once), writes manifest.json, fsyncs it and the
// directory, renames the directory to step_N, fsyncs the parent, then replaces `latest`
// (latest.tmp, fsync, rename, fsync) and only then prunes old checkpoints. A crash at any point
// leaves the previous checkpoint and `latest` intact.
//
// Coordination. The library does no collectives itself: the caller passes `agree`, called by
// every rank at the same three points with whether its own part succeeded, returning whether
// every rank's did (over MPI: CommAgreeFn and AgreeOnAttemptTag, comm_agreement.h; ranks
// simulated as threads: a std::barrier). One "all ranks got here, and all succeeded" primitive
// is all a save needs; it keeps the library independent of how the caller communicates, testable
// without MPI, and lets every rank learn about a failure elsewhere instead of hanging in a
// barrier, so a failed save is abandoned by all ranks together and never committed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "engine/checkpoint/shard_file_sink.h"
#include "engine/checkpoint/shard_format.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

// Called collectively; returns whether every rank passed true. Non-OK when the agreement itself
// failed (a collective timed out).
using AgreeFn = std::function<Result<bool>(bool local_ok)>;

struct SaveRequest {
  std::filesystem::path checkpoints_dir;  // RUN_DIR/checkpoints; created when missing
  int64_t step = 0;
  int rank = 0;
  int world = 1;
  int zero_stage = 0;
  // Names the staging directory step_N.tmp-TAG: identical on every rank and new for every save
  // (e.g. a random number rank 0 broadcast). "" picks a random one, only for world 1.
  std::string attempt_tag;
  // Committed checkpoints kept after this save (by step number; the new one is always kept).
  // 0 keeps all.
  int keep_last = 0;
  uint64_t checksum_block_bytes = kDefaultChecksumBlockBytes;
  // How the shard files are written: through the rank's I/O engine (AioShardFileIo), or buffered.
  ShardFileIo io;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();  // recorded from rank 0
  nlohmann::ordered_json states = nlohmann::ordered_json::object();  // recorded from rank 0
  // Optional: called on rank 0 at each named point of the commit sequence ("files_written",
  // "manifest_written", "renamed", "latest_updated", "pruned"): tests kill the process there.
  std::function<void(std::string_view point)> progress_hook;
};

// Saves this rank's `tensors` (several kinds, (kind, name) unique) as part of checkpoint
// `request.step`; returns the committed step directory. Every rank calls it with the same
// request fields except `rank` and with its own tensors. `agree` may be empty for world 1.
Result<std::filesystem::path> SaveCheckpoint(const SaveRequest& request,
                                             std::span<const ShardTensor> tensors,
                                             const AgreeFn& agree);

// Writes this rank's two shard files (ShardFileName(group, request.rank), both groups, with
// request.checksum_block_bytes and request.io) into the staging directory and fsyncs them: a
// RankStreamWriter (shard_stream_writer.h) fed from wherever the state lives.
using RankFilesWriter = std::function<Status(const std::filesystem::path& staging_dir)>;

// SaveCheckpoint with the files written by `write_files` instead of from tensors in memory (the
// training checkpoint streams optimizer state from NVMe this way). The same sequence: a failure
// of `write_files` on any rank abandons the save on all of them, and nothing is committed.
Result<std::filesystem::path> SaveCheckpointStreamed(const SaveRequest& request,
                                                     const RankFilesWriter& write_files,
                                                     const AgreeFn& agree);

// Deletes every checkpoint in `checkpoints_dir`: `latest` first, then each step_N (renamed to a
// staging name before it is deleted, as pruning does), then leftovers of interrupted saves. A
// crash part-way leaves no `latest` naming a deleted step. What `sluice train --overwrite` does to
// the checkpoints of the run a fresh run replaces. Nothing to do when the directory is missing.
Status RemoveAllCheckpoints(const std::filesystem::path& checkpoints_dir);

}  // namespace sluice::checkpoint
