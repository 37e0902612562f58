// What the ZeRO engine (zero_engine.h) is told: the zero_optimization keys it implements, the
// precision of the parameters, the optimizer and the accumulation count. All sizes are element
// counts, as in DeepSpeed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/zero/zero_sections.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

namespace sluice {
struct Config;
}  // namespace sluice

namespace sluice::zero {

// Built from a config by ZeroOptionsFromConfig alone, the registry's defaults by
// DefaultZeroOptions: the fields hold no defaults of their own (a ZeroOptions made on its own is
// blank).
struct ZeroOptions {
  // 0: replicated (DDP); 1: + optimizer state sharded; 2: + gradients; 3: + parameters.
  int stage{};
  // Collectives run on the comm stream while the calling thread computes; off: each collective is
  // waited for as soon as it is issued.
  bool overlap_comm{};
  int64_t reduce_bucket_size{};
  int64_t allgather_bucket_size{};
  int64_t stage3_prefetch_bucket_size{};
  int64_t stage3_param_persistence_threshold{};
  int64_t stage3_max_live_parameters{};
  int64_t stage3_max_reuse_distance{};
  int64_t gradient_accumulation_steps{};
  // DeepSpeed's prescale_gradients and gradient_predivide_factor: how stages 0 and 1 scale the
  // gradients around their all-reduce (gradient_scaling.h); stages 2 and 3 take the defaults only.
  bool prescale_gradients{};
  double gradient_predivide_factor{};
  // How parameters are stored in the shards and travel in all-gathers: kF32, kBF16 or kF16. The
  // compute copy the model reads is always fp32; the optimizer keeps fp32 master weights.
  DType param_dtype{};
  OptimizerConfig optimizer;
  // Threads of the optimizer kernel and the gradient norm; 0 = OpenMP's default.
  int num_threads{};
  // zero_optimization.offload_optimizer (stages 1-3): device none keeps the optimizer state and
  // the fp32 gradient shard on the device; cpu / nvme moves both off it (zero_optimizer.h).
  OffloadOptimizerConfig offload_optimizer;
  // zero_optimization.offload_param (stage 3): device cpu / nvme keeps the parameter shard in
  // host memory / the swap store (parameter_coordinator.h).
  OffloadParamConfig offload_param;
  // zero_optimization.sub_group_size: the offloaded optimizer's tile (offload_options.h).
  int64_t sub_group_size{};
  // aio.*: the I/O engine of the NVMe tiers.
  AioConfig aio;
};

// From a resolved config: zero_optimization.*, gradient_accumulation_steps, prescale_gradients,
// gradient_predivide_factor, the model dtype (fp16/bf16 sections), the optimizer, device.threads
// and the offload sections. The settings were validated as the config loaded (nothing here checks
// them again); Unimplemented for an optimizer this engine has no kernel for on the device.
Result<ZeroOptions> ZeroOptionsFromConfig(const Config& config);
// The options of the registry's defaults (Config()): stage 0, AdamW, nothing offloaded.
ZeroOptions DefaultZeroOptions();

// A named integer that every rank must agree on (rank_agreement.h).
struct AgreedValue {
  std::string key;  // the config key, or what the value is ("model parameters")
  int64_t value = 0;
};

// Every option as an AgreedValue, keyed by its config name.
std::vector<AgreedValue> AgreedValuesOf(const ZeroOptions& options);

}  // namespace sluice::zero
