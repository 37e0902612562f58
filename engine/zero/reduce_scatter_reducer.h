// Stages 2 and 3: no full gradient buffer survives a pass. Before a unit's backward, a full-size
// fp32 gradient buffer is bound for every unit whose storage it writes (its own; the embeddings'
// for a tied LM head), zeroed. After the unit's backward its parameters join the open bucket
// (reduce_bucket_size elements at most, a bigger parameter alone); a full bucket is, on the comm
// stream: packed rank-major by partition (shard_layout.h), reduce-scattered (averaged), and this
// rank's piece added into its fp32 gradient shard, which so accumulates the micro-batches in
// fp32. The packing is CopySegments; a device shard takes the piece by AccumulateSegments, the
// offloaded optimizer's host shard by a copy into pinned memory and host code on it (ZeRO-Offload's
// bucketed device-to-host gradient copies). A unit's gradient buffer is freed on the comm stream
// once its last bucket has been packed.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "engine/model/parameter_registry.h"
#include "engine/zero/comm_queue.h"
#include "engine/zero/device_segments.h"
#include "engine/zero/gradient_reducer.h"
#include "engine/zero/shard_layout.h"
#include "engine/zero/zero_binding.h"
#include "runtime/device.h"

namespace sluice::zero {

class ReduceScatterReducer final : public GradientReducer {
 public:
  // `grad_shard` (layout.shard_elements() floats) and everything else must outlive the reducer.
  // `compute` is the stream the backward accumulates the unit gradients on. `shard_on_host`: the
  // shard is the offloaded optimizer's host memory, else device memory.
  ReduceScatterReducer(const model::ParameterRegistry& registry, const ShardLayout& layout,
                       CommQueue& queue, Stream& compute, ZeroBinding& binding, float* grad_shard,
                       bool shard_on_host, int64_t bucket_size, ops::OpsBackend& ops);
  ~ReduceScatterReducer() override;

  Status BeginPass(bool boundary) override;
  Status BeforeBackward(int unit) override;
  Status AfterBackward(int unit) override;
  Status AfterBackwardInput(int unit, std::span<const int> deferred) override;
  Status BeforeBackwardWeight(int unit) override;
  Status AfterBackwardWeight(int unit, std::span<const int> deferred) override;
  Status EndPass() override;
  const ReducerStats& stats() const override { return stats_; }
  size_t LargestStagingBytes() const override;

 private:
  struct Bucket {
    std::vector<int> run;               // partition indices, in the order they joined
    std::vector<const float*> sources;  // each one's full gradient
    std::vector<DeviceBuffer> release;  // unit buffers whose last parameter is in here
    int64_t numel = 0;
    int64_t piece = 0;  // this rank's piece of the collective: its padded partitions' elements
  };

  Status Flush();
  // Allocates `unit`'s buffer, zeroed on the compute stream, and binds its parameters' gradients
  // there.
  Status BindNew(int unit);
  void Unbind(int unit);
  // AfterBackward for the unit's parameters `take` accepts (all when null): they join the open
  // bucket, and the unit's buffer is let go once they are packed.
  Status Take(int unit, const std::function<bool(int param)>& take);

  const model::ParameterRegistry* registry_;
  const ShardLayout* layout_;
  CommQueue* queue_;
  Stream* compute_;
  ZeroBinding* binding_;
  float* grad_shard_;
  int64_t bucket_size_;
  std::vector<std::vector<int>> writes_;  // per unit: the units whose gradients it writes
  std::vector<DeviceBuffer> unit_grads_;  // per unit, while bound
  // The compute stream waits for the oldest bucket in flight.
  Status Retire();

  // The device work of one bucket: a pack list per partition of its run, the accumulation.
  struct BucketMoves {
    std::vector<std::unique_ptr<DeviceSegments>> packs;
    std::unique_ptr<DeviceSegments> accumulate;
  };
  Result<const BucketMoves*> MovesFor(const std::vector<int>& run);

  // The largest piece of the buckets a backward in reverse registry order forms, which sizes the
  // staging memory; no bucket grows beyond it.
  int64_t LargestPiece() const;

  Bucket open_;
  ops::OpsBackend* ops_;
  bool shard_on_host_;
  int64_t largest_piece_;
  std::vector<bool> in_open_;  // per partition: its gradient is in the open bucket
  PinnedBuffer host_piece_;    // a host shard's reduced piece, copied out of the staging buffer
  std::map<std::vector<int>, BucketMoves> moves_;  // by the bucket's run
  std::deque<CommTicket> in_flight_;
  // Elements of the unit gradient buffers bound now (stats_ keeps the peak).
  int64_t live_gradient_elements_ = 0;
  ReducerStats stats_;
};

}  // namespace sluice::zero
