#include "engine/zero/lamb_step.h"

#include <fmt/format.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/lamb.h"

namespace sluice::zero {

kernels::LambHyperparams LambHyperparamsFor(const OptimizerConfig& config, double lr,
                                            int64_t step) {
  kernels::LambHyperparams hyper;
  hyper.lr = static_cast<float>(lr);
  hyper.beta1 = static_cast<float>(config.beta1);
  hyper.beta2 = static_cast<float>(config.beta2);
  hyper.eps = static_cast<float>(config.eps);
  hyper.weight_decay = static_cast<float>(config.weight_decay);
  hyper.bias_correction = config.bias_correction;
  hyper.eps_inside_sqrt = config.eps_inside_sqrt;
  hyper.max_coeff = static_cast<float>(config.max_coeff);
  hyper.min_coeff = static_cast<float>(config.min_coeff);
  hyper.step = step;
  return hyper;
}

Status CheckLambOnDevice(const ops::OpsBackend& ops) {
  if (ops.kind() != DeviceKind::kCpu) {
    return UnimplementedError(
        "optimizer.type Lamb keeps its state on the {} device, and Sluice has no LAMB kernel for "
        "it: set device.type cpu, or use optimizer.type AdamW",
        DeviceKindName(ops.kind()));
  }
  return OkStatus();
}

Status LambShardStep(ops::OpsBackend& ops, Stream& stream, const LambPlan& plan,
                     const kernels::LambTensors& shard, const kernels::LambHyperparams& hyper,
                     float grad_scale, const kernels::AdamThreading& threading) {
  SLUICE_RETURN_IF_ERROR(CheckLambOnDevice(ops));
  if (std::string error = kernels::LambArgsError(shard, hyper, threading, /*need_grads=*/true);
      !error.empty()) {
    return InvalidArgumentError("LAMB step: {}", error);
  }
  int64_t covered = 0;
  for (const LambSegment& s : plan.segments) {
    if (s.offset != covered || s.count < 0) {
      return InvalidArgumentError(
          "LAMB step: segment [{}, {}) does not follow the previous one, which ends at {}",
          s.offset, s.offset + s.count, covered);
    }
    covered += s.count;
  }
  if (covered != static_cast<int64_t>(shard.count)) {
    return InvalidArgumentError("LAMB step: the segments cover {} elements of a shard of {}",
                                covered, shard.count);
  }
  const bool reference = ops.name() == "ref";
  // Pass 1 on the stream (device memory is touched only by work enqueued there), into host
  // memory the host reads once the stream is done: two sums per parameter, [param_sq, update_sq].
  auto sums = std::make_shared<std::vector<double>>(2 * plan.segments.size(), 0.0);
  const std::vector<LambSegment>& segments = plan.segments;
  SLUICE_RETURN_IF_ERROR(ops.device().LaunchHostFunc(
      stream,
      [sums, segments, shard, hyper, grad_scale, threading, reference]() {
        for (size_t i = 0; i < segments.size(); ++i) {
          const kernels::LambTensors piece =
              kernels::SliceLambTensors(shard, static_cast<size_t>(segments[i].offset),
                                        static_cast<size_t>(segments[i].count));
          const kernels::LambNormSums local =
              reference ? kernels::LambMomentsReference(piece, hyper, grad_scale)
                        : kernels::LambMoments(piece, hyper, grad_scale, threading);
          (*sums)[2 * i] = local.param_sq;
          (*sums)[2 * i + 1] = local.update_sq;
        }
        return OkStatus();
      },
      "LAMB moments"));
  SLUICE_RETURN_IF_ERROR(stream.Synchronize());
  if (plan.sum_across_ranks) {
    Status summed = plan.sum_across_ranks(*sums);
    if (!summed.ok()) return std::move(summed).WithContext("summing LAMB's norms across ranks");
  }
  std::vector<float> trust(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    trust[i] = kernels::LambTrustRatio({(*sums)[2 * i], (*sums)[2 * i + 1]}, hyper);
  }
  // Pass 2, enqueued: later work on the stream (the all-gathers of the parameters) follows it.
  return ops.device().LaunchHostFunc(
      stream,
      [segments, trust = std::move(trust), shard, hyper, threading, reference]() {
        for (size_t i = 0; i < segments.size(); ++i) {
          const kernels::LambTensors piece =
              kernels::SliceLambTensors(shard, static_cast<size_t>(segments[i].offset),
                                        static_cast<size_t>(segments[i].count));
          if (reference) {
            kernels::LambApplyReference(piece, hyper, trust[i]);
          } else {
            kernels::LambApply(piece, hyper, trust[i], threading);
          }
        }
        return OkStatus();
      },
      "LAMB apply");
}

}  // namespace sluice::zero
