// LAMB (optimizer.type Lamb; kernels/cpu/lamb.h) over a ZeRO shard: the trust ratio of each
// parameter needs the norms of the whole parameter and of its update, and a shard holds one piece
// of each parameter (its partition, shard_layout.h), the other pieces being on other ranks. So a
// step is two passes over the shard: pass 1 updates the moments piece by piece and collects each
// piece's squared sums; the plan's sum_across_ranks adds every rank's sums, parameter by
// parameter, in rank order (the same bits on every rank); pass 2 moves each piece with its
// parameter's trust ratio, recomputing the update from p, m and v instead of storing it.
//
// The ops table (runtime/ops/ops_backend.h) has no LAMB op, so, as Lion's (optimizer_step.h),
// the CPU kernels run as host functions on the stream, and the host waits for pass 1 to read its
// sums: only a device whose memory the host addresses allows that; a CUDA device is refused,
// naming optimizer.type.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/zero/zero_sections.h"
#include "kernels/cpu/adam_parallel.h"
#include "kernels/ref/lamb_ref.h"
#include "runtime/device.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"

namespace sluice::zero {

// One parameter's piece of the shard: elements [offset, offset + count).
struct LambSegment {
  int64_t offset = 0;
  int64_t count = 0;
};

// Adds, element by element, every rank's `sums` into `sums` in rank order (collective; every
// rank passes the same length).
using LambSumAcrossRanks = std::function<Status(std::span<double> sums)>;

struct LambPlan {
  // In shard order, covering the whole shard (padding included: zero, it adds nothing).
  std::vector<LambSegment> segments;
  // Null when this rank holds every parameter whole (stage 0, one rank).
  LambSumAcrossRanks sum_across_ranks;
};

// The kernels' hyperparameters; `step` is the 1-based step being taken.
kernels::LambHyperparams LambHyperparamsFor(const OptimizerConfig& config, double lr, int64_t step);

// OK, or Unimplemented naming optimizer.type when LAMB's state cannot live on `ops`' device.
Status CheckLambOnDevice(const ops::OpsBackend& ops);

// Both passes over `shard` (all of its tensors `count` elements of `ops`' device memory, the plan's
// segments covering them), after the work enqueued on `stream` so far: pass 1 is done when this
// returns (the host waited for it), pass 2 is enqueued on `stream`. The ref column steps in the
// scalar reference; results are the same bits.
Status LambShardStep(ops::OpsBackend& ops, Stream& stream, const LambPlan& plan,
                     const kernels::LambTensors& shard, const kernels::LambHyperparams& hyper,
                     float grad_scale, const kernels::AdamThreading& threading);

}  // namespace sluice::zero
