// The gradient side of a ZeRO pass: after each unit's backward its finished gradients join a
// bucket of reduce_bucket_size elements; a full bucket is reduced (averaged over the ranks) on
// the comm stream while the backward goes on with the next units. Two implementations:
//   AllReduceReducer (stages 0, 1): full fp32 gradients accumulate locally over the micro-batches;
//     during the last micro-batch's backward the buckets are all-reduced in place.
//   ReduceScatterReducer (stages 2, 3): each micro-batch's gradients are reduce-scattered, and
//     each rank adds its piece into its fp32 gradient shard (accumulation over micro-batches).
// Streams: a bucket's collective starts on the comm stream once the compute stream has finished
// the backward that wrote its gradients (CommQueue::OrderAfter), and the host never waits for it.
// At most kMaxBucketsInFlight buckets are outstanding (DeepSpeed's max_param_reduce_events):
// before another goes out, the compute stream waits for the oldest (CommQueue::Join), which
// bounds the memory of pending buckets when the network is slower than the compute.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/status.h"

namespace sluice::zero {

struct ReducerStats {
  int64_t buckets = 0;           // collectives issued
  int64_t reduced_elements = 0;  // gradient elements they covered (no padding)
  // Stages 2-3: elements of the units' gradient buffers bound at once, at the most (0 when the
  // gradients live in one full buffer).
  int64_t peak_gradient_elements = 0;
};

class GradientReducer {
 public:
  static constexpr int kMaxBucketsInFlight = 2;

  virtual ~GradientReducer() = default;

  // A micro-batch's pass begins. `boundary`: the last micro-batch before the optimizer step.
  virtual Status BeginPass(bool boundary) = 0;
  // The model is about to run `unit`'s backward: its gradient storage must be bound.
  virtual Status BeforeBackward(int unit) = 0;
  // `unit`'s backward is done: its own gradients are final.
  virtual Status AfterBackward(int unit) = 0;
  // Split backward (zero-bubble schedules), for a reducer of every micro-batch (stages 2-3):
  // `unit`'s backward-input is done, but the gradients of `deferred` (its parameters whose
  // weight gradients Model::BackwardWeight computes) come later, possibly after other
  // micro-batches' backward-inputs ran the unit again. AfterBackwardInput takes the unit's other
  // gradients, final now, and lets its storage go; BeforeBackwardWeight binds fresh storage for
  // the backward-weight and AfterBackwardWeight takes `deferred`'s. So one unit's storage is live
  // at a time, as in a fused backward. A reducer of the step's last micro-batch (stages 0-1)
  // accumulates in storage that lives through the step and takes each unit once, with
  // AfterBackward, when its last backward-weight is done: it needs none of these.
  virtual Status AfterBackwardInput(int unit, std::span<const int> deferred) { return OkStatus(); }
  virtual Status BeforeBackwardWeight(int unit) { return OkStatus(); }
  virtual Status AfterBackwardWeight(int unit, std::span<const int> deferred) { return OkStatus(); }
  // After the backward was enqueued: issues the last bucket; the work enqueued on the compute
  // stream next runs after every reduction of the pass.
  virtual Status EndPass() = 0;

  virtual const ReducerStats& stats() const = 0;
  // The comm queue's staging memory (bytes) the largest bucket of a pass needs.
  virtual size_t LargestStagingBytes() const = 0;
};

}  // namespace sluice::zero
