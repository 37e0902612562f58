// The gradient norm of a device-resident shard without the host touching it: LocalSquaredSum's
// blocks (shard_grad_norm.h) as an ops::BlockSumList, uploaded once per layout and summed by the
// ops backend on the compute stream. Only the per-block sums come back to the host, which adds
// them in block order: on the host columns, LocalSquaredSum's bits.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/zero/shard_grad_norm.h"
#include "engine/zero/shard_layout.h"
#include "runtime/device.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"

namespace sluice::zero {

// The owned elements of a shard as the pieces of the norm's blocks, in LocalSquaredSum's order:
// block j (the j-th block of the model's flat index that holds owned elements) is
// pieces[first[j]] .. pieces[first[j + 1] - 1].
struct NormBlocks {
  std::vector<ops::SumPiece> pieces;
  std::vector<int64_t> first = {0};
  int64_t blocks() const { return static_cast<int64_t>(first.size()) - 1; }
};
NormBlocks BuildNormBlocks(const ShardLayout& layout, const NormCounted& counted = {});

// LocalSquaredSum of a shard in host memory with LocalSquaredSum's bits: each block summed in
// order by one of `threads` threads, the block sums added in block order.
double HostSquaredSum(const NormBlocks& blocks, const float* grad_shard, int threads);

class ShardNormPlan {
 public:
  // Uploads the layout's blocks of the counted parameters to `stream`'s device (complete on
  // return).
  static Result<std::unique_ptr<ShardNormPlan>> Create(Stream& stream, const ShardLayout& layout,
                                                       const NormCounted& counted = {});

  // The sum of squares of the counted owned elements of `grad_shard` (device memory, the layout's
  // shard_elements() floats), after the work enqueued on `stream` so far. Waits for the stream.
  Result<double> LocalSquaredSum(ops::OpsBackend& ops, Stream& stream, const float* grad_shard);

 private:
  ShardNormPlan() = default;

  int64_t shard_elements_ = 0;
  int64_t blocks_ = 0;
  DeviceBuffer pieces_;
  DeviceBuffer first_;
  DeviceBuffer sums_;  // one double per block, written on the stream
  std::vector<double> host_sums_;
};

}  // namespace sluice::zero
