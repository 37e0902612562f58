// Sluice's one Adam wrapper: the ZeRO engine's at every stage (hence `sluice train`'s) and the
// tests' flat single-rank reference. Adam / AdamW over this rank's shard (stages 1-3) or the
// whole flat buffer (stage 0), with fp32 master weights, exp_avg and exp_avg_sq on the device
// (category optimizer), one fused pass of the CPU Adam kernel (kernels/cpu/adam.h) per step. The
// updated parameters are written in the parameter dtype into the parameter shard, the source of
// the next all-gather: in f32 the master weights are that shard itself; in bf16 / f16 the kernel
// writes the rounded copy there. Adam is elementwise, so a shard steps exactly as the same
// elements of an unsharded run would; padding elements (gradient 0, value 0) stay 0.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/config/config.h"
#include "engine/zero/optimizer_state_stream.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

namespace sluice::zero {

class ShardedAdam {
 public:
  // `param_shard` holds `count` values of `param_dtype` and must outlive the optimizer.
  // ResourceExhausted when the state does not fit the device.
  static Result<std::unique_ptr<ShardedAdam>> Create(Device& device, const OptimizerConfig& config,
                                                     DType param_dtype, void* param_shard,
                                                     int64_t count, int num_threads);

  // Master weights := the parameter shard's values (after it was initialized or loaded).
  void LoadMasterFromParams();
  // One step: update = Adam(grads * grad_scale) at rate `lr` over `count` elements; advances
  // the bias-correction step. A skipped step must not call this.
  Status Step(const float* grads, double lr, double grad_scale);
  // Replaces the whole state (each pointer: `count` values) and the step counter, and sets the
  // parameter shard to the master weights in the parameter dtype, rounded as Step() writes them:
  // a checkpoint restore (OffloadedAdam::RestoreState's counterpart).
  Status RestoreState(const float* master, const float* exp_avg, const float* exp_avg_sq,
                      int64_t step);

  int64_t step() const { return step_; }
  int64_t count() const { return count_; }
  const float* master() const { return master_; }
  const float* exp_avg() const { return exp_avg_.data_as<float>(); }
  const float* exp_avg_sq() const { return exp_avg_sq_.data_as<float>(); }
  // Bytes of optimizer state on the device (master weights only when kept apart).
  uint64_t state_bytes() const;

 private:
  ShardedAdam() = default;

  OptimizerConfig config_;
  DType param_dtype_ = DType::kF32;
  void* param_shard_ = nullptr;
  int64_t count_ = 0;
  int num_threads_ = 0;
  int64_t step_ = 0;
  DeviceBuffer master_buffer_;  // empty in f32
  float* master_ = nullptr;
  DeviceBuffer exp_avg_;
  DeviceBuffer exp_avg_sq_;
};

// RestoreState from a source (offloaded_adam.h) through host copies of the whole state: the
// device holds all of it anyway, so they are no larger than what the device already holds.
Status RestoreShardedAdam(ShardedAdam& adam, const OptimizerStateSource& source, int64_t step);

}  // namespace sluice::zero
