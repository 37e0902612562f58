#include "engine/zero/shard_norm_plan.h"

#include <algorithm>

#include "engine/zero/device_segments.h"
#include "engine/zero/shard_grad_norm.h"
#include "runtime/ops/block_squared_sums.h"

namespace sluice::zero {

NormBlocks BuildNormBlocks(const ShardLayout& layout, const NormCounted& counted) {
  NormBlocks out;
  int64_t block = -1;
  for (const PartitionInfo* p : PartitionsInFlatOrder(layout, counted)) {
    const ShardSpan owned = layout.Owned(*p);
    int64_t at = p->shard_offset;
    int64_t flat = p->full_offset + static_cast<int64_t>(owned.offset);
    const int64_t flat_end = flat + static_cast<int64_t>(owned.count);
    while (flat < flat_end) {
      const int64_t b = flat / kNormBlock;
      if (b != block) {
        if (block >= 0) out.first.push_back(static_cast<int64_t>(out.pieces.size()));
        block = b;
      }
      const int64_t end = std::min(flat_end, (b + 1) * kNormBlock);
      out.pieces.push_back({.offset = at, .count = end - flat});
      at += end - flat;
      flat = end;
    }
  }
  if (block >= 0) out.first.push_back(static_cast<int64_t>(out.pieces.size()));
  return out;
}

double HostSquaredSum(const NormBlocks& blocks, const float* grad_shard, int threads) {
  std::vector<double> sums(static_cast<size_t>(blocks.blocks()), 0.0);
  ops::BlockSquaredSumsOnHost(
      grad_shard,
      {.pieces = blocks.pieces.data(), .first = blocks.first.data(), .blocks = blocks.blocks()},
      sums.data(), threads);
  double total = 0.0;
  for (double sum : sums) total += sum;
  return total;
}

Result<std::unique_ptr<ShardNormPlan>> ShardNormPlan::Create(Stream& stream,
                                                             const ShardLayout& layout,
                                                             const NormCounted& counted) {
  const NormBlocks blocks = BuildNormBlocks(layout, counted);
  std::unique_ptr<ShardNormPlan> plan(new ShardNormPlan());
  plan->shard_elements_ = layout.shard_elements();
  plan->blocks_ = blocks.blocks();
  SLUICE_ASSIGN_OR_RETURN(
      plan->pieces_, UploadArray<ops::SumPiece>(stream, blocks.pieces, "the norm's block pieces"));
  SLUICE_ASSIGN_OR_RETURN(plan->first_,
                          UploadArray<int64_t>(stream, blocks.first, "the norm's block index"));
  plan->host_sums_.assign(static_cast<size_t>(blocks.blocks()), 0.0);
  SLUICE_ASSIGN_OR_RETURN(plan->sums_,
                          UploadArray<double>(stream, plan->host_sums_, "the norm's block sums"));
  return plan;
}

Result<double> ShardNormPlan::LocalSquaredSum(ops::OpsBackend& ops, Stream& stream,
                                              const float* grad_shard) {
  if (blocks_ == 0) return 0.0;
  const int index = stream.device().index();
  SLUICE_RETURN_IF_ERROR(ops.BlockSquaredSums(
      stream,
      Tensor(const_cast<float*>(grad_shard), DType::kF32, {shard_elements_}, MemoryTier::kDevice,
             index),
      {.pieces = pieces_.data_as<ops::SumPiece>(),
       .first = first_.data_as<int64_t>(),
       .blocks = blocks_},
      Tensor(sums_.data(), DType::kF64, {blocks_}, MemoryTier::kDevice, index)));
  SLUICE_RETURN_IF_ERROR(stream.device().CopyAsync(
      host_sums_.data(), sums_.data(), host_sums_.size() * sizeof(double), CopyKind::kD2H, stream));
  SLUICE_RETURN_IF_ERROR(stream.Synchronize());
  double total = 0.0;
  for (double sum : host_sums_) total += sum;
  return total;
}

}  // namespace sluice::zero
