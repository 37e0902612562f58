#include "engine/zero/zero_options.h"

#include <bit>

#include "engine/config/config.h"
#include "runtime/check.h"

namespace sluice::zero {

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
  // The settings were validated once, as the config loaded (config_resolve.cpp, the registry's
  // ranges); what is left is what this engine can run.
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

ZeroOptions DefaultZeroOptions() {
  Result<ZeroOptions> options = ZeroOptionsFromConfig(Config());
  SLUICE_CHECK(options.ok()) << "the registry's defaults give invalid ZeRO options: "
                             << options.status().ToString();
  return std::move(options).value();
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
