#include "engine/checkpoint/shard_writer.h"

#include <vector>

#include "engine/checkpoint/shard_stream_writer.h"

namespace sluice::checkpoint {

Status ValidateShardTensor(const ShardTensor& t) {
  SLUICE_RETURN_IF_ERROR(ValidateShardTensorInfo(t));
  if (t.end > t.begin && t.data == nullptr) {
    return InvalidArgumentError("checkpoint tensor '{}/{}': {} elements with no data pointer",
                                StateKindName(t.kind), t.name, t.end - t.begin);
  }
  return OkStatus();
}

Status WriteShardFile(const std::filesystem::path& path, ShardGroup group, int rank, int world,
                      std::span<const ShardTensor* const> tensors, uint64_t block_bytes) {
  std::vector<ShardTensorInfo> infos;
  infos.reserve(tensors.size());
  for (const ShardTensor* t : tensors) {
    SLUICE_RETURN_IF_ERROR(ValidateShardTensor(*t));
    infos.push_back(*t);
  }
  SLUICE_ASSIGN_OR_RETURN(auto writer, ShardStreamWriter::Create(path, group, rank, world,
                                                                 std::move(infos), block_bytes));
  for (size_t i = 0; i < tensors.size(); ++i) {
    SLUICE_RETURN_IF_ERROR(
        writer->Append(i, tensors[i]->data, tensors[i]->end - tensors[i]->begin));
  }
  return writer->Finish();
}

}  // namespace sluice::checkpoint
