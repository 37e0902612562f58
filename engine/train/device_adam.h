// The optimizer of a single-rank run (ZeRO stage 0, no offload): Adam / AdamW with its whole
// state on the device (category optimizer): fp32 master weights (except in f32 mode, where the
// model's own fp32 parameters are the master copy), exp_avg and exp_avg_sq, and in f16 mode a
// staging buffer for the fp16 copy. One Step() is one fused pass of the CPU Adam kernel
// (kernels/cpu/adam.h) over the flat buffers; its grad_scale is the loss-scale inverse times the
// clip coefficient, and it writes the updated parameters back into the model's buffer in the
// model's storage dtype (precision.h).
//
// On the CPU backend device memory is host memory with a capacity, so "Adam on the device" is
// the kernel run directly on that memory by the calling thread with the run's thread count.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/config/config.h"
#include "engine/train/precision.h"
#include "kernels/cpu/adam.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::train {

class DeviceAdam {
 public:
  // `model_params` is the model's flat parameter buffer of `count` elements in
  // ModelParamDType(precision); it must outlive the optimizer. The master weights start as its
  // current values (widened from bf16). ResourceExhausted when the state does not fit the
  // device; InvalidArgument for hyperparameters the kernel rejects (naming the config key).
  static Result<std::unique_ptr<DeviceAdam>> Create(Device& device, const OptimizerConfig& config,
                                                    Precision precision, void* model_params,
                                                    int64_t count, int num_threads);

  // One step over the fp32 gradients (count elements, same offsets as the parameters), with
  // update = Adam(grads * grad_scale) at rate `lr`. Advances the step counter used for bias
  // correction; a skipped step must simply not call this.
  Status Step(const float* grads, double lr, double grad_scale);

  // Steps applied so far.
  int64_t step() const { return step_; }
  int64_t count() const { return count_; }
  const float* master() const { return master_; }
  const float* exp_avg() const { return exp_avg_.data_as<float>(); }
  const float* exp_avg_sq() const { return exp_avg_sq_.data_as<float>(); }
  // Bytes of optimizer state held on the device.
  uint64_t state_bytes() const;

 private:
  DeviceAdam() = default;

  OptimizerConfig config_;
  Precision precision_ = Precision::kF32;
  void* model_params_ = nullptr;
  int64_t count_ = 0;
  int num_threads_ = 0;
  int64_t step_ = 0;
  DeviceBuffer master_buffer_;  // empty in f32 mode
  float* master_ = nullptr;     // master_buffer_ or the model's fp32 parameters
  DeviceBuffer exp_avg_;
  DeviceBuffer exp_avg_sq_;
  DeviceBuffer staging_;  // f16 mode: the fp16 copy before it is widened into the model
};

}  // namespace sluice::train
