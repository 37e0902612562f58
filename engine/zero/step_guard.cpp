#include "engine/zero/step_guard.h"

#include <cmath>

#include "engine/zero/partition_copy.h"
#include "engine/zero/shard_grad_norm.h"
#include "engine/zero/word_gather.h"

namespace sluice::zero {

Result<std::unique_ptr<StepGuard>> StepGuard::Create(const StepGuardOptions& options,
                                                     const ShardLayout& layout, bool grads_on_host,
                                                     ops::OpsBackend& ops, Stream& compute,
                                                     CommQueue& queue) {
  std::unique_ptr<StepGuard> guard(new StepGuard(options, layout, ops, compute, queue));
  if (!grads_on_host) {
    SLUICE_ASSIGN_OR_RETURN(guard->norm_plan_, ShardNormPlan::Create(compute, layout));
  }
  return guard;
}

Result<double> StepGuard::LocalSquaredSum(float* grads) {
  if (options_.param_dtype == DType::kF16) {
    // What an fp16 backward would have produced: a scaled gradient past 65504 becomes inf.
    const ShardLayout* layout = layout_;
    const int threads = options_.num_threads;
    SLUICE_RETURN_IF_ERROR(ops_->device().LaunchHostFunc(
        *compute_,
        [layout, grads, threads] {
          RoundThrough(grads, layout->shard_elements(), DType::kF16, threads);
          return OkStatus();
        },
        "fp16 rounding of the gradients"));
  }
  if (norm_plan_ != nullptr) return norm_plan_->LocalSquaredSum(*ops_, *compute_, grads);
  // The offloaded optimizer's host shard: the host sums it once the passes wrote it.
  SLUICE_RETURN_IF_ERROR(compute_->Synchronize());
  return zero::LocalSquaredSum(*layout_, grads);
}

Result<double> StepGuard::SumOverModelParallel(double data_sum) {
  // Every parameter is replicated across the tensor ranks today: tensor rank 0 counts it, the
  // others add nothing but a non-finite value, so that an overflow anywhere skips everywhere.
  const double mine = options_.counts_replicated || !std::isfinite(data_sum) ? data_sum : 0.0;
  // The queue is idle between its Run calls: this control collective cannot interleave with it.
  Result<double> sum = SumInRankOrder(*options_.model_parallel, mine);
  if (!sum.ok()) {
    return Status(sum.status())
        .WithContext("completing the gradient norm over the tensor and pipeline ranks");
  }
  return sum;
}

Result<ZeroStepResult> StepGuard::Check(float* grads, const ZeroStepInput& input) {
  SLUICE_ASSIGN_OR_RETURN(const double local, LocalSquaredSum(grads));
  double total = local;
  if (options_.sharded) {
    SLUICE_RETURN_IF_ERROR(queue_->Run("all_gather gradient norm", [&total, local](Comm& comm) {
      SLUICE_ASSIGN_OR_RETURN(total, SumInRankOrder(comm, local));
      return OkStatus();
    }));
  }
  if (options_.model_parallel != nullptr) {
    SLUICE_ASSIGN_OR_RETURN(total, SumOverModelParallel(total));
  }
  ZeroStepResult result;
  result.local_overflow = !std::isfinite(local);
  result.overflow = !std::isfinite(total);
  result.grad_norm = std::sqrt(total) * (1.0 / input.loss_scale);
  if (!result.overflow)
    result.clip_coefficient = ClipCoefficient(result.grad_norm, input.max_grad_norm);
  return result;
}

}  // namespace sluice::zero
