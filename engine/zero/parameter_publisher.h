// Publishing the updated parameters of stages 0-2 into the replicated fp32 compute copy the
// passes read (stage 3 publishes only its persistent parameters, through the coordinator):
//   stage 0     widens the bf16 / f16 parameters into the copy on the compute stream (nothing in
//               f32, where the copy is the master weights);
//   stages 1-2  all-gather the parameter shard in buckets of consecutive partitions (up to
//               allgather_bucket_size gathered elements per collective; a larger partition alone)
//               on the comm stream and unpack each bucket into the copy there, the compute
//               stream joining the gathers before the next pass.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/zero/comm_queue.h"
#include "engine/zero/device_segments.h"
#include "engine/zero/shard_layout.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"

namespace sluice::zero {

// The engine's options for it (ZeroOptions), no defaults of their own.
struct ParameterPublisherOptions {
  int stage{};  // 0, 1 or 2
  DType param_dtype{};
  int64_t allgather_bucket_size{};  // zero_optimization.allgather_bucket_size
};

class ParameterPublisher {
 public:
  // `param_shard` (the layout's shard in the parameter dtype; stage 0: every parameter) and
  // `full_params` (layout.total_elements() floats) are device memory; they, `layout`, `ops`,
  // `compute` and `queue` must outlive the publisher. The unpacking lists are uploaded here.
  static Result<std::unique_ptr<ParameterPublisher>> Create(
      const ParameterPublisherOptions& options, const ShardLayout& layout, ops::OpsBackend& ops,
      Stream& compute, CommQueue& queue, void* param_shard, float* full_params);

  // The comm queue's staging the largest gather needs (0 in stage 0).
  size_t LargestStagingBytes() const;
  // Enqueues the publication after the work on the compute stream so far (the optimizer's
  // update); the next pass on the compute stream reads the published copy.
  Status Publish();

 private:
  struct Bucket {
    size_t first = 0;  // partitions [first, last)
    size_t last = 0;
    int64_t piece = 0;  // their elements on each rank
  };
  ParameterPublisher(const ParameterPublisherOptions& options, const ShardLayout& layout,
                     ops::OpsBackend& ops, Stream& compute, CommQueue& queue, void* param_shard,
                     float* full_params)
      : options_(options),
        layout_(&layout),
        ops_(&ops),
        compute_(&compute),
        queue_(&queue),
        param_shard_(param_shard),
        full_params_(full_params) {}
  std::vector<Bucket> BucketsOf() const;
  Status Widen();
  Status AllGather();

  ParameterPublisherOptions options_;
  const ShardLayout* layout_;
  ops::OpsBackend* ops_;
  Stream* compute_;
  CommQueue* queue_;
  void* param_shard_;
  float* full_params_;
  std::vector<Bucket> buckets_;                          // stages 1-2
  std::vector<std::unique_ptr<DeviceSegments>> unpack_;  // per bucket
};

}  // namespace sluice::zero
