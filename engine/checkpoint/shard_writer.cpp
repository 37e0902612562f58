#include "engine/checkpoint/shard_writer.h"

#include <vector>

#include "engine/checkpoint/shard_stream_writer.h"

namespace sluice::checkpoint {

Status WriteRankShardFiles(const std::filesystem::path& dir, int rank, int world,
                           std::span<const ShardTensor> tensors, uint64_t block_bytes,
                           const ShardFileIo& io) {
  const std::vector<ShardTensorInfo> infos(tensors.begin(), tensors.end());
  SLUICE_ASSIGN_OR_RETURN(RankStreamWriter out,
                          RankStreamWriter::Create(dir, rank, world, infos, block_bytes, io));
  for (size_t i = 0; i < tensors.size(); ++i) {
    SLUICE_RETURN_IF_ERROR(out.Append(i, tensors[i].data, tensors[i].elements()));
  }
  return out.Finish();
}

}  // namespace sluice::checkpoint
