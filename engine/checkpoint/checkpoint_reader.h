// Reading a sharded checkpoint, whatever world size wrote it.
//
//   SLUICE_ASSIGN_OR_RETURN(auto dir, checkpoint::ResolveCheckpointDir(run_dir / "checkpoints"));
//   SLUICE_ASSIGN_OR_RETURN(auto ckpt, checkpoint::CheckpointReader::Open(dir));
//   ckpt->manifest().step;  ckpt->manifest().states["rng"];
//   // this rank's partition of a parameter, for the new world size:
//   SLUICE_RETURN_IF_ERROR(ckpt->ReadRange(StateKind::kExpAvg, name, begin, end, dst));
//
// Open() reads and validates the manifest (no duplicated key, its checksums, a step_N directory
// holding step N). A group's files (weights, optimizer) are checked (present, with the size and
// the header checksum the manifest records, so a file from another checkpoint is refused),
// opened and their tables validated on first use, so reading master weights never touches the
// optimizer files: a copy of a checkpoint without them still converts.
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/shard_reader.h"
#include "engine/checkpoint/tensor_index.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

class CheckpointReader {
 public:
  static Result<std::unique_ptr<CheckpointReader>> Open(const std::filesystem::path& step_dir);

  const std::filesystem::path& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  // The manifest's tensors of `kind`, in the order they were saved.
  std::vector<const ManifestTensor*> Tensors(StateKind kind) const;
  const ManifestTensor* Find(StateKind kind, std::string_view name) const;

  // Elements [begin, end) of the flattened tensor, in its stored dtype, assembled from the
  // slices of whichever ranks hold them; every block read is checksum-verified. NotFound naming
  // the tensor; OutOfRange for a range outside it; DataLoss naming the file, the tensor, the
  // field and the offset for anything corrupt.
  Status ReadRange(StateKind kind, std::string_view name, int64_t begin, int64_t end,
                   void* dst) const;
  // Opens both groups and reads every byte of every rank file, verifying every checksum.
  Status VerifyAll() const;

 private:
  struct GroupFiles {
    std::vector<std::unique_ptr<ShardFileReader>> files;
    std::optional<TensorIndex> index;
  };

  CheckpointReader() = default;
  Result<const GroupFiles*> LoadGroup(ShardGroup group) const;

  std::filesystem::path dir_;
  Manifest manifest_;
  mutable std::mutex mutex_;
  mutable std::optional<GroupFiles> groups_[2];
};

}  // namespace sluice::checkpoint
