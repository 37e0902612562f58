#include "engine/zero/zero_options.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <string_view>

#include "engine/zero/adam_hyperparams.h"
#include "engine/zero/lamb_step.h"
#include "kernels/ref/adam_ref.h"

namespace sluice::zero {
namespace {

Status RequirePositive(std::string_view key, int64_t value) {
  if (value > 0) return OkStatus();
  return InvalidArgumentError("{} = {} must be a positive element count", key, value);
}

Status RequireNonNegative(std::string_view key, int64_t value) {
  if (value >= 0) return OkStatus();
  return InvalidArgumentError("{} = {} must be an element count of 0 or more", key, value);
}

}  // namespace

Result<ZeroOptions> ZeroOptionsFromConfig(const Config& config) {
  const ZeroConfig& z = config.zero;
  ZeroOptions o;
  o.stage = z.stage;
  o.overlap_comm = z.overlap_comm;
  o.reduce_bucket_size = z.reduce_bucket_size;
  o.allgather_bucket_size = z.allgather_bucket_size;
  o.stage3_prefetch_bucket_size = z.stage3_prefetch_bucket_size;
  o.stage3_param_persistence_threshold = z.stage3_param_persistence_threshold;
  o.stage3_max_live_parameters = z.stage3_max_live_parameters;
  o.stage3_max_reuse_distance = z.stage3_max_reuse_distance;
  o.gradient_accumulation_steps = config.batch.gradient_accumulation_steps;
  o.prescale_gradients = config.prescale_gradients;
  o.gradient_predivide_factor = config.gradient_predivide_factor;
  o.param_dtype = config.model.dtype;
  o.optimizer = config.optimizer;
  o.num_threads = config.device.threads;
  o.offload_optimizer = z.offload_optimizer;
  o.offload_param = z.offload_param;
  o.sub_group_size = z.sub_group_size;
  o.aio = config.aio;
  SLUICE_RETURN_IF_ERROR(ValidateZeroOptions(o));
  if (o.optimizer.type == OptimizerType::kLion &&
      o.offload_optimizer.device == OffloadDevice::kNone &&
      config.device.type == DeviceType::kCuda) {
    // Found here, before anything is allocated; ShardedAdam::Create refuses it too.
    return UnimplementedError(
        "optimizer.type Lion with zero_optimization.offload_optimizer.device none keeps Lion's "
        "state on the cuda device, and Sluice has no Lion kernel for it yet: set "
        "zero_optimization.offload_optimizer.device to cpu or nvme (Lion then runs as the fused "
        "CPU kernel, as DeepSpeed's DeepSpeedCPULion does), or use optimizer.type AdamW");
  }
  if (o.optimizer.type == OptimizerType::kLamb && config.device.type == DeviceType::kCuda) {
    return UnimplementedError(
        "optimizer.type Lamb on device.type cuda is not supported: Sluice's LAMB is the fused "
        "CPU kernel (two passes with the norms summed across ranks) and has no CUDA kernel yet; "
        "set device.type cpu, or use optimizer.type AdamW");
  }
  return o;
}

Status ValidateZeroOptions(const ZeroOptions& o) {
  if (o.stage < 0 || o.stage > 3) {
    return InvalidArgumentError("zero_optimization.stage = {} must be 0, 1, 2 or 3", o.stage);
  }
  SLUICE_RETURN_IF_ERROR(
      RequirePositive("zero_optimization.reduce_bucket_size", o.reduce_bucket_size));
  SLUICE_RETURN_IF_ERROR(
      RequirePositive("zero_optimization.allgather_bucket_size", o.allgather_bucket_size));
  SLUICE_RETURN_IF_ERROR(RequireNonNegative("zero_optimization.stage3_prefetch_bucket_size",
                                            o.stage3_prefetch_bucket_size));
  SLUICE_RETURN_IF_ERROR(RequireNonNegative("zero_optimization.stage3_param_persistence_threshold",
                                            o.stage3_param_persistence_threshold));
  SLUICE_RETURN_IF_ERROR(RequirePositive("zero_optimization.stage3_max_live_parameters",
                                         o.stage3_max_live_parameters));
  SLUICE_RETURN_IF_ERROR(RequireNonNegative("zero_optimization.stage3_max_reuse_distance",
                                            o.stage3_max_reuse_distance));
  if (o.gradient_accumulation_steps < 1) {
    return InvalidArgumentError("gradient_accumulation_steps = {} must be at least 1",
                                o.gradient_accumulation_steps);
  }
  if (!(std::isfinite(o.gradient_predivide_factor) && o.gradient_predivide_factor > 0.0)) {
    return InvalidArgumentError("gradient_predivide_factor = {} must be a finite number > 0",
                                o.gradient_predivide_factor);
  }
  if (o.stage >= 2 && (o.prescale_gradients || o.gradient_predivide_factor != 1.0)) {
    // As DeepSpeed's stage 2 and 3 optimizers assert with reduce_scatter on, which Sluice always
    // is (gradient_scaling.h).
    return InvalidArgumentError(
        "{} needs zero_optimization.stage 0 or 1: stage {} reduce-scatters the gradients, where "
        "DeepSpeed refuses it too",
        o.prescale_gradients
            ? "prescale_gradients = true"
            : fmt::format("gradient_predivide_factor = {}", o.gradient_predivide_factor),
        o.stage);
  }
  if (o.offload_optimizer.device != OffloadDevice::kNone && o.stage == 0) {
    return InvalidArgumentError(
        "zero_optimization.offload_optimizer.device = {} needs zero_optimization.stage 1, 2 or 3 "
        "(stage 0 replicates the optimizer state on every rank; as in DeepSpeed)",
        OffloadDeviceName(o.offload_optimizer.device));
  }
  if (o.offload_param.device != OffloadDevice::kNone && o.stage != 3) {
    return InvalidArgumentError(
        "zero_optimization.offload_param.device = {} needs zero_optimization.stage 3 (only stage "
        "3 partitions the parameters; as in DeepSpeed), got stage {}",
        OffloadDeviceName(o.offload_param.device), o.stage);
  }
  if (o.offload_optimizer.device == OffloadDevice::kNvme && o.offload_optimizer.nvme_path.empty()) {
    return InvalidArgumentError(
        "zero_optimization.offload_optimizer.device = nvme needs "
        "zero_optimization.offload_optimizer.nvme_path");
  }
  if (const OffloadOptimizerConfig& oo = o.offload_optimizer;
      !(oo.ratio >= 0.0 && oo.ratio <= 1.0)) {
    return InvalidArgumentError(
        "zero_optimization.offload_optimizer.ratio = {} must be in [0, 1] (the fraction of the "
        "optimizer state offloaded) or \"auto\"",
        oo.ratio);
  } else if (oo.partial()) {
    const std::string ratio = oo.ratio_auto ? "\"auto\"" : fmt::format("{}", oo.ratio);
    if (o.stage != 3) {
      return InvalidArgumentError(
          "zero_optimization.offload_optimizer.ratio = {} needs zero_optimization.stage 3 (as in "
          "DeepSpeed: partial offload only at stage 3), got stage {}; set the ratio to 1",
          ratio, o.stage);
    }
    if (o.offload_param.device == OffloadDevice::kNvme) {
      return InvalidArgumentError(
          "zero_optimization.offload_optimizer.ratio = {} cannot be combined with "
          "zero_optimization.offload_param.device = nvme: the parameter shard then lives in an "
          "NVMe store that only the fully offloaded optimizer writes; set the ratio to 1 or "
          "offload_param.device to cpu or none",
          ratio);
    }
  }
  if (o.offload_param.device == OffloadDevice::kNvme &&
      o.offload_optimizer.device == OffloadDevice::kNone) {
    return InvalidArgumentError(
        "zero_optimization.offload_param.device = nvme needs offload_optimizer.device cpu or nvme: "
        "an optimizer on the device keeps fp32 master weights of the whole shard there, so the "
        "parameters would not leave the device");
  }
  if (o.offload_param.device == OffloadDevice::kNvme && o.offload_param.nvme_path.empty()) {
    return InvalidArgumentError(
        "zero_optimization.offload_param.device = nvme needs "
        "zero_optimization.offload_param.nvme_path");
  }
  if (o.optimizer.type == OptimizerType::kLamb) {
    if (o.offload_optimizer.device != OffloadDevice::kNone) {
      // Pass 2 needs every parameter's norms from pass 1: on NVMe it would re-read every tile, and
      // DeepSpeed's FusedLamb has no CPU kernel for offloaded state.
      return UnimplementedError(
          "optimizer.type Lamb with zero_optimization.offload_optimizer.device {} is not "
          "supported: set offload_optimizer.device none, or use optimizer.type AdamW or Lion",
          OffloadDeviceName(o.offload_optimizer.device));
    }
    const kernels::LambHyperparams hyper = LambHyperparamsFor(o.optimizer, o.optimizer.lr, 1);
    if (std::string error = kernels::LambHyperparamsError(hyper); !error.empty()) {
      return InvalidArgumentError("optimizer.params: {}", error);
    }
    return OkStatus();
  }
  if (o.optimizer.type == OptimizerType::kLion) {
    if (o.offload_optimizer.partial()) {
      // The split's device-budget arithmetic (offload_ratio.h) counts Adam's two moments.
      return InvalidArgumentError(
          "optimizer.type Lion with zero_optimization.offload_optimizer.ratio {} (a partial "
          "offload) is not supported yet: set the ratio to 1, or offload_optimizer.device none",
          o.offload_optimizer.ratio_auto ? std::string("\"auto\"")
                                         : fmt::format("{}", o.offload_optimizer.ratio));
    }
    const kernels::LionHyperparams hyper = LionHyperparamsFor(o.optimizer, o.optimizer.lr);
    if (std::string error = kernels::LionHyperparamsError(hyper); !error.empty()) {
      return InvalidArgumentError("optimizer.params: {}", error);
    }
    return OkStatus();
  }
  const kernels::AdamHyperparams hyper = AdamHyperparamsFor(o.optimizer, o.optimizer.lr, 1);
  if (std::string error = kernels::AdamHyperparamsError(hyper); !error.empty()) {
    return InvalidArgumentError("optimizer.params: {}", error);
  }
  return OkStatus();
}

std::vector<AgreedValue> AgreedValuesOf(const ZeroOptions& o) {
  auto bits = [](double value) { return std::bit_cast<int64_t>(value); };
  return {
      {"zero_optimization.stage", o.stage},
      {"zero_optimization.overlap_comm", o.overlap_comm ? 1 : 0},
      {"zero_optimization.reduce_bucket_size", o.reduce_bucket_size},
      {"zero_optimization.allgather_bucket_size", o.allgather_bucket_size},
      {"zero_optimization.stage3_prefetch_bucket_size", o.stage3_prefetch_bucket_size},
      {"zero_optimization.stage3_param_persistence_threshold",
       o.stage3_param_persistence_threshold},
      {"zero_optimization.stage3_max_live_parameters", o.stage3_max_live_parameters},
      {"zero_optimization.stage3_max_reuse_distance", o.stage3_max_reuse_distance},
      {"gradient_accumulation_steps", o.gradient_accumulation_steps},
      {"prescale_gradients", o.prescale_gradients ? 1 : 0},
      {"gradient_predivide_factor (bits)", bits(o.gradient_predivide_factor)},
      {"model.dtype (parameter precision)", static_cast<int64_t>(o.param_dtype)},
      {"optimizer.type", static_cast<int64_t>(o.optimizer.type)},
      {"optimizer.type (adam_w_mode)", o.optimizer.adam_w_mode ? 1 : 0},
      {"optimizer.params.bias_correction", o.optimizer.bias_correction ? 1 : 0},
      {"optimizer.params.betas[0] (bits)", bits(o.optimizer.beta1)},
      {"optimizer.params.betas[1] (bits)", bits(o.optimizer.beta2)},
      {"optimizer.params.eps (bits)", bits(o.optimizer.eps)},
      {"optimizer.params.weight_decay (bits)", bits(o.optimizer.weight_decay)},
      {"optimizer.params.max_coeff (bits)", bits(o.optimizer.max_coeff)},
      {"optimizer.params.min_coeff (bits)", bits(o.optimizer.min_coeff)},
      {"optimizer.params.eps_inside_sqrt", o.optimizer.eps_inside_sqrt ? 1 : 0},
      {"zero_optimization.offload_optimizer.device",
       static_cast<int64_t>(o.offload_optimizer.device)},
      {"zero_optimization.offload_param.device", static_cast<int64_t>(o.offload_param.device)},
  };
}

}  // namespace sluice::zero
