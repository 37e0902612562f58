// Stages 0 and 1: the gradients are the full flat fp32 buffer, replicated. Micro-batches
// accumulate into it locally; during the boundary micro-batch's backward, contiguous runs of
// finished units (reduce_bucket_size elements at most, a bigger unit alone) are all-reduced
// (averaged) in place on the comm stream, overlapping the backward of the units below (DDP).
// In place, they hold no memory: nothing bounds the buckets in flight, and the compute stream
// waits for them all at the end of the pass.
// A unit's range is final after its own backward, since units only ever read earlier units'
// storage (a tied LM head writes the embeddings' gradient before the embeddings' backward).
// With prescale_gradients or gradient_predivide_factor (gradient_scaling.h) a bucket is scaled on
// the compute stream before the comm stream is ordered after it, summed, and the reduced ranges
// are scaled on the compute stream at the end of the pass, once it has joined their collectives:
// before anything (stage 1's extraction, the norm, the optimizer) reads them.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "engine/model/parameter_registry.h"
#include "engine/zero/comm_queue.h"
#include "engine/zero/gradient_reducer.h"
#include "engine/zero/gradient_scaling.h"
#include "runtime/ops/ops_backend.h"

namespace sluice::zero {

class AllReduceReducer final : public GradientReducer {
 public:
  // `full_grads` (registry.total_elements() floats) must outlive the reducer, and `ops` (which
  // scales them, on the device of `queue`) too. `compute` is the stream the backward writes the
  // gradients on.
  AllReduceReducer(const model::ParameterRegistry& registry, CommQueue& queue, Stream& compute,
                   ops::OpsBackend& ops, float* full_grads, int64_t bucket_size,
                   GradientScaling scaling = {});

  Status BeginPass(bool boundary) override;
  Status BeforeBackward(int unit) override { return OkStatus(); }
  Status AfterBackward(int unit) override;
  Status EndPass() override;
  const ReducerStats& stats() const override { return stats_; }
  // All-reduces run in place.
  size_t LargestStagingBytes() const override { return 0; }

 private:
  Status Flush();
  // Elements [offset, offset + count) of the gradients times `factor`, on the compute stream.
  Status ScaleOnCompute(int64_t offset, int64_t count, float factor);

  const model::ParameterRegistry* registry_;
  CommQueue* queue_;
  Stream* compute_;
  ops::OpsBackend* ops_;
  float* full_grads_;
  int64_t bucket_size_;
  GradientScaling scaling_;
  // Ranges reduced this pass that still need scaling.after: [offset, count].
  std::vector<std::pair<int64_t, int64_t>> to_scale_after_;
  bool boundary_ = false;
  int64_t pending_offset_ = 0;  // the open bucket: [offset, offset + count) of the flat buffer
  int64_t pending_count_ = 0;
  std::deque<CommTicket> in_flight_;
  ReducerStats stats_;
};

}  // namespace sluice::zero
