// The step guard: between the last micro-batch and the optimizer, the global gradient norm, the
// overflow check and the clip coefficient, DeepSpeed's order (fp16 rounding, norm, skip on a
// non-finite norm, clip) in one unit.
//
// The squared norm of this rank's shard is summed on the compute stream (ShardNormPlan) when the
// shard is device memory, or by the host once the stream is done when the offloaded optimizer
// holds it in host memory; the ranks' sums are added in rank order over the data-parallel group
// (ZeRO's comm queue) and then over the model-parallel group, where a parameter replicated across
// the tensor ranks is counted by tensor rank 0 only and each piece of a split one by its holder.
// The host reads the result back here, at the step boundary: the one place a step waits for the
// device.
#pragma once

#include <memory>

#include "engine/zero/comm_queue.h"
#include "engine/zero/shard_grad_norm.h"
#include "engine/zero/shard_layout.h"
#include "engine/zero/shard_norm_plan.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"

namespace sluice::zero {

struct ZeroStepInput {
  double lr = 1e-3;
  // The factor the loss gradients were multiplied by (fp16 loss scaling); 1 otherwise.
  double loss_scale = 1.0;
  // gradient_clipping: the global norm is clipped to this; 0 disables.
  double max_grad_norm = 0.0;
};

struct ZeroStepResult {
  // L2 norm of the unscaled gradient over all ranks; inf or NaN when `overflow`.
  double grad_norm = 0.0;
  // Some gradient element on some rank was inf or NaN (in f16: after rounding to fp16): every
  // rank skipped the step. The caller reports it to its loss scaler.
  bool overflow = false;
  // This rank's own shard held such an element.
  bool local_overflow = false;
  double clip_coefficient = 1.0;
};

// Elements of the device block the fp16 rounding goes through (2 bytes each).
inline constexpr int64_t kF16RoundBlock = int64_t{1} << 16;

struct StepGuardOptions {
  DType param_dtype = DType::kF32;  // f16: the gradients are rounded to fp16 first
  int num_threads = 1;              // the host's rounding and sums
  // The shard is only this rank's part (stages 1-3): its sum is completed over the data group.
  bool sharded = true;
  // The tensor x pipeline peers of this data rank (null: none), and the parameters this rank
  // counts among those its tensor peers hold too (shard_grad_norm.h; empty: every one).
  Comm* model_parallel = nullptr;
  NormCounted counted;
};

class StepGuard {
 public:
  // `grads_on_host`: the gradient shard is host memory (the offloaded optimizer's), summed by the
  // host; otherwise device memory, summed by `ops` on `compute` (a plan is uploaded once here).
  // `layout`, `ops`, `compute` and `queue` must outlive the guard.
  static Result<std::unique_ptr<StepGuard>> Create(const StepGuardOptions& options,
                                                   const ShardLayout& layout, bool grads_on_host,
                                                   ops::OpsBackend& ops, Stream& compute,
                                                   CommQueue& queue);

  // The norm, overflow and clip coefficient of the gradients `grads` (the layout's shard, or the
  // full buffer in stage 0) after the work enqueued on the compute stream so far. Collective over
  // the data and model-parallel groups.
  Result<ZeroStepResult> Check(float* grads, const ZeroStepInput& input);

 private:
  StepGuard(const StepGuardOptions& options, const ShardLayout& layout, ops::OpsBackend& ops,
            Stream& compute, CommQueue& queue)
      : options_(options), layout_(&layout), ops_(&ops), compute_(&compute), queue_(&queue) {}
  Status RoundToF16(float* grads);
  Result<double> LocalSquaredSum(float* grads);
  Result<double> SumOverModelParallel(double data_sum);

  StepGuardOptions options_;
  const ShardLayout* layout_;
  ops::OpsBackend* ops_;
  Stream* compute_;
  CommQueue* queue_;
  std::unique_ptr<ShardNormPlan> norm_plan_;  // device-resident gradients only
  NormBlocks host_blocks_;                    // host-resident gradients only
  DeviceBuffer f16_block_;                    // fp16 with device-resident gradients only
};

}  // namespace sluice::zero
