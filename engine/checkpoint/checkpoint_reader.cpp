#include "engine/checkpoint/checkpoint_reader.h"

#include <algorithm>
#include <system_error>

#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/checkpoint/manifest_checksum.h"

namespace sluice::checkpoint {
namespace {

int GroupSlot(ShardGroup group) { return group == ShardGroup::kWeights ? 0 : 1; }

}  // namespace

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(
    const std::filesystem::path& step_dir) {
  std::unique_ptr<CheckpointReader> reader(new CheckpointReader());
  reader->dir_ = step_dir;
  SLUICE_ASSIGN_OR_RETURN(reader->manifest_, ReadManifest(step_dir));
  // A committed step directory is named after its step (a copy under another name is fine).
  const std::string name = (step_dir / "").parent_path().filename().string();
  if (std::optional<int64_t> named = ParseStepDirName(name);
      named.has_value() && *named != reader->manifest_.step) {
    return DataLossError(
        "{}: field 'step' is {} but the checkpoint's directory is {}: the manifest or the "
        "directory name was changed",
        (step_dir / kManifestFileName).string(), reader->manifest_.step, name);
  }
  return reader;
}

std::vector<const ManifestTensor*> CheckpointReader::Tensors(StateKind kind) const {
  std::vector<const ManifestTensor*> out;
  for (const ManifestTensor& t : manifest_.tensors) {
    if (t.kind == kind) out.push_back(&t);
  }
  return out;
}

const ManifestTensor* CheckpointReader::Find(StateKind kind, std::string_view name) const {
  for (const ManifestTensor& t : manifest_.tensors) {
    if (t.kind == kind && t.name == name) return &t;
  }
  return nullptr;
}

Result<const CheckpointReader::GroupFiles*> CheckpointReader::LoadGroup(ShardGroup group) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<GroupFiles>& slot = groups_[GroupSlot(group)];
  if (slot) return &*slot;
  for (const ManifestRank& rank : manifest_.ranks) {
    const ManifestFile& file = rank.files.at(group);
    const std::filesystem::path path = dir_ / file.path;
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec) {
      return DataLossError(
          "checkpoint {}: rank {}'s {} file {} is missing or unreadable ({}) "
          "(manifest field world.ranks[{}].files.{})",
          dir_.string(), rank.rank, ShardGroupName(group), path.string(), ec.message(), rank.rank,
          ShardGroupName(group));
    }
    if (size != file.bytes) {
      return DataLossError(
          "checkpoint {}: rank {}'s {} file {} has {} bytes but the manifest "
          "(world.ranks[{}].files.{}.bytes) says {}: {}",
          dir_.string(), rank.rank, ShardGroupName(group), path.string(), size, rank.rank,
          ShardGroupName(group), file.bytes,
          size < file.bytes ? "truncated" : "the file was changed");
    }
  }
  GroupFiles loaded;
  std::vector<const ShardFileReader*> views;
  for (const ManifestRank& rank : manifest_.ranks) {
    const std::filesystem::path path = dir_ / rank.files.at(group).path;
    SLUICE_ASSIGN_OR_RETURN(auto file,
                            ShardFileReader::Open(path, group, rank.rank, manifest_.world_size));
    const std::optional<uint64_t>& recorded = rank.files.at(group).checksum;
    if (recorded.has_value() && file->header().header_checksum != *recorded) {
      return DataLossError(
          "checkpoint {}: rank {}'s {} file {} is not the file this checkpoint was saved with: "
          "its header checksum is {} but the manifest (world.ranks[{}].files.{}.checksum) "
          "records {}; it was replaced, e.g. copied from another checkpoint",
          dir_.string(), rank.rank, ShardGroupName(group), path.string(),
          FormatChecksum(file->header().header_checksum), rank.rank, ShardGroupName(group),
          FormatChecksum(*recorded));
    }
    views.push_back(file.get());
    loaded.files.push_back(std::move(file));
  }
  SLUICE_ASSIGN_OR_RETURN(TensorIndex index, TensorIndex::Build(views));
  // The files must hold exactly the manifest's tensors of this group, as the manifest says.
  size_t expected = 0;
  for (const ManifestTensor& t : manifest_.tensors) {
    if (GroupOf(t.kind) != group) continue;
    ++expected;
    const TensorSlices* slices = index.Find(t.kind, t.name);
    const std::string label = fmt::format("{}/{}", StateKindName(t.kind), t.name);
    if (slices == nullptr) {
      return DataLossError("checkpoint {}: tensor '{}' is in the manifest but in no {} file",
                           dir_.string(), label, ShardGroupName(group));
    }
    if (slices->tensor.dtype != t.dtype || !(slices->tensor.shape == t.shape)) {
      return DataLossError(
          "checkpoint {}: tensor '{}' is {} {} in the manifest but {} {} in the "
          "{} files",
          dir_.string(), label, DTypeName(t.dtype), t.shape.ToString(),
          DTypeName(slices->tensor.dtype), slices->tensor.shape.ToString(), ShardGroupName(group));
    }
  }
  if (index.tensors().size() != expected) {
    for (const TensorSlices& t : index.tensors()) {
      if (Find(t.tensor.kind, t.tensor.name) == nullptr) {
        return DataLossError(
            "checkpoint {}: the {} files hold tensor '{}/{}' that the manifest "
            "does not list",
            dir_.string(), ShardGroupName(group), StateKindName(t.tensor.kind), t.tensor.name);
      }
    }
  }
  loaded.index = std::move(index);
  slot = std::move(loaded);
  return &*slot;
}

Status CheckpointReader::ReadRange(StateKind kind, std::string_view name, int64_t begin,
                                   int64_t end, void* dst) const {
  const ManifestTensor* tensor = Find(kind, name);
  if (tensor == nullptr) {
    return NotFoundError("checkpoint {} has no tensor '{}/{}'", dir_.string(), StateKindName(kind),
                         name);
  }
  const int64_t numel = tensor->shape.numel();
  if (begin < 0 || begin > end || end > numel) {
    return OutOfRangeError("checkpoint tensor '{}/{}': range [{}, {}) is outside its {} elements",
                           StateKindName(kind), name, begin, end, numel);
  }
  SLUICE_ASSIGN_OR_RETURN(const GroupFiles* group, LoadGroup(GroupOf(kind)));
  const TensorSlices* slices = group->index->Find(kind, name);
  SLUICE_CHECK(slices != nullptr);
  char* out = static_cast<char*>(dst);
  const size_t esize = DTypeSize(tensor->dtype);
  for (const RankSlice& s : slices->slices) {
    const int64_t from = std::max(begin, s.entry->begin);
    const int64_t to = std::min(end, s.entry->end);
    if (from >= to) continue;
    SLUICE_RETURN_IF_ERROR(
        s.file->ReadElements(*s.entry, from, to, out + static_cast<size_t>(from - begin) * esize));
  }
  return OkStatus();
}

Status CheckpointReader::VerifyAll() const {
  for (ShardGroup g : kAllShardGroups) {
    SLUICE_ASSIGN_OR_RETURN(const GroupFiles* group, LoadGroup(g));
    for (const auto& file : group->files) SLUICE_RETURN_IF_ERROR(file->VerifyAll());
  }
  return OkStatus();
}

}  // namespace sluice::checkpoint
