#include "engine/zero/step_guard.h"

#include <algorithm>
#include <cmath>

#include "engine/zero/partition_copy.h"
#include "engine/zero/shard_grad_norm.h"
#include "engine/zero/word_gather.h"
#include "runtime/memory_kinds.h"
#include "runtime/tensor.h"

namespace sluice::zero {

Result<std::unique_ptr<StepGuard>> StepGuard::Create(const StepGuardOptions& options,
                                                     const ShardLayout& layout, bool grads_on_host,
                                                     ops::OpsBackend& ops, Stream& compute,
                                                     CommQueue& queue) {
  std::unique_ptr<StepGuard> guard(new StepGuard(options, layout, ops, compute, queue));
  if (grads_on_host) {
    guard->host_blocks_ = BuildNormBlocks(layout, options.counted);
  } else {
    SLUICE_ASSIGN_OR_RETURN(guard->norm_plan_,
                            ShardNormPlan::Create(compute, layout, options.counted));
    if (options.param_dtype == DType::kF16) {
      const int64_t block = std::min(kF16RoundBlock, layout.shard_elements());
      SLUICE_ASSIGN_OR_RETURN(
          guard->f16_block_,
          compute.device().Allocate(static_cast<size_t>(std::max<int64_t>(block, 1)) * 2,
                                    MemoryCategory::kBuffers));
    }
  }
  return guard;
}

// What an fp16 backward would have produced: a scaled gradient past 65504 becomes inf. Device
// gradients go through the f16 block and back by the ops, in stream order (the host never reads
// them); the offloaded optimizer's host shard is rounded by a host function of the stream.
Status StepGuard::RoundToF16(float* grads) {
  const int64_t n = layout_->shard_elements();
  if (norm_plan_ == nullptr) {
    const int threads = options_.num_threads;
    return ops_->device().LaunchHostFunc(
        *compute_,
        [grads, n, threads] {
          RoundThrough(grads, n, DType::kF16, threads);
          return OkStatus();
        },
        "fp16 rounding of the host gradient shard");
  }
  const int index = ops_->device().index();
  for (int64_t begin = 0; begin < n; begin += kF16RoundBlock) {
    const int64_t count = std::min(kF16RoundBlock, n - begin);
    const Tensor values(grads + begin, DType::kF32, {count}, MemoryTier::kDevice, index);
    const Tensor half(f16_block_.data(), DType::kF16, {count}, MemoryTier::kDevice, index);
    SLUICE_RETURN_IF_ERROR(ops_->Convert(*compute_, values, half));
    SLUICE_RETURN_IF_ERROR(ops_->Convert(*compute_, half, values));
  }
  return OkStatus();
}

Result<double> StepGuard::LocalSquaredSum(float* grads) {
  if (options_.param_dtype == DType::kF16) SLUICE_RETURN_IF_ERROR(RoundToF16(grads));
  if (norm_plan_ != nullptr) return norm_plan_->LocalSquaredSum(*ops_, *compute_, grads);
  // The offloaded optimizer's host shard: the host sums it once the passes wrote it.
  SLUICE_RETURN_IF_ERROR(compute_->Synchronize());
  return HostSquaredSum(host_blocks_, grads, options_.num_threads);
}

Result<double> StepGuard::SumOverModelParallel(double data_sum) {
  // Each rank's sum already leaves out what its peers count (options_.counted).
  // The queue is idle between its Run calls: this control collective cannot interleave with it.
  Result<double> sum = SumInRankOrder(*options_.model_parallel, data_sum);
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
