// The settings sections the ZeRO engine is configured by, as plain structs: the optimizer,
// zero_optimization.offload_optimizer and offload_param, and aio. The engine defines them, and
// the config (engine/config/config.h) embeds them in Config, so that no header of the engine
// includes the config. They hold no defaults: every setting's default is declared once, in the
// settings registry (config_schema.cpp), and a struct made on its own is blank; take one from a
// Config (Config() holds the registry's defaults).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {

// Lion (kernels/ref/lion_ref.h) keeps one moment (exp_avg), Adam, AdamW and Lamb
// (kernels/ref/lamb_ref.h) two.
enum class OptimizerType { kAdam, kAdamW, kLion, kLamb };
struct OptimizerConfig {
  OptimizerType type{};  // as written ("adam" and "Adam" are kAdam)
  // Effective decoupled weight decay: type AdamW, or Adam with adam_w_mode (DeepSpeed's rule).
  // Adam only: Lion always decouples its weight decay.
  bool adam_w_mode{};
  double lr{};
  double beta1{};
  double beta2{};
  double eps{};  // Adam and Lamb
  double weight_decay{};
  bool bias_correction{};  // Adam and Lamb; off: the moments are used without 1 - beta^t
  // Lamb only (DeepSpeed's FusedLamb): the trust ratio's clamp, and eps under the square root.
  double max_coeff{};
  double min_coeff{};
  bool eps_inside_sqrt{};
};

// "Adam", "AdamW", "Lion", "Lamb": the config's spelling (optimizer.type), for messages and
// checkpoints.
inline std::string_view OptimizerTypeName(OptimizerType type) {
  switch (type) {
    case OptimizerType::kAdam:
      return "Adam";
    case OptimizerType::kAdamW:
      return "AdamW";
    case OptimizerType::kLion:
      return "Lion";
    case OptimizerType::kLamb:
      return "Lamb";
  }
  return "?";
}
// The moment tensors the optimizer keeps per element besides the fp32 master weights: 2 for Adam,
// AdamW and Lamb (exp_avg, exp_avg_sq), 1 for Lion (exp_avg).
inline int OptimizerMoments(OptimizerType type) { return type == OptimizerType::kLion ? 1 : 2; }

enum class OffloadDevice { kNone, kCpu, kNvme };
// "none", "cpu", "nvme": the config's spelling.
inline std::string_view OffloadDeviceName(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::kNone:
      return "none";
    case OffloadDevice::kCpu:
      return "cpu";
    case OffloadDevice::kNvme:
      return "nvme";
  }
  return "?";
}

// zero_optimization.offload_optimizer.
struct OffloadOptimizerConfig {
  OffloadDevice device{};
  std::string nvme_path;  // set iff device == kNvme
  bool pin_memory{};
  int buffer_count{};
  // The fraction of the optimizer state that is offloaded (DeepSpeed's Twin-Flow meaning): with
  // the shard cut into N tiles, tiles from floor((1 - ratio) x N) on are offloaded and the first
  // ones stay on the device, stepped there (engine/zero/split_optimizer.h). 1 = all offloaded;
  // below 1 needs stage 3.
  double ratio{};
  // ratio "auto" (`ratio` then reads 1): chosen when the engine is created, from the measured
  // throughput of device Adam and offloaded Adam and capped by auto_state_budget
  // (engine/zero/offload_ratio.h).
  bool ratio_auto{};
  // ratio "auto": the device bytes the optimizer's device part may hold on each rank (what the
  // device budget leaves once the memory estimate of the rest of the engine is counted,
  // estimate::ResolveAutoRatioBudget); -1 = not known: half the device memory still free when
  // the optimizer is created.
  int64_t auto_state_budget = -1;
  // On by default, unlike DeepSpeed (docs/config.md: deliberate differences).
  bool pipeline_read{};
  bool pipeline_write{};

  // A partial offload (engine/zero/split_optimizer.h): offloaded, with a ratio below 1 or "auto".
  bool partial() const { return device != OffloadDevice::kNone && (ratio < 1.0 || ratio_auto); }
};

// zero_optimization.offload_param.
struct OffloadParamConfig {
  OffloadDevice device{};
  std::string nvme_path;  // set iff device == kNvme
  bool pin_memory{};
  int buffer_count{};
  int64_t buffer_size{};  // elements, not bytes (as in DeepSpeed)
  int64_t max_in_cpu{};   // elements
};

// aio: the I/O engine of the NVMe tiers (offload/aio_options.h, built by AioOptionsOf).
struct AioConfig {
  int64_t block_size{};  // bytes
  int queue_depth{};
  int intra_op_parallelism{};
  bool single_submit{};
  bool overlap_events{};
};

}  // namespace sluice
