#include "engine/zero/sharded_adam.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "engine/zero/adam_hyperparams.h"
#include "engine/zero/partition_copy.h"
#include "engine/zero/zeroed_buffer.h"
#include "kernels/cpu/adam.h"

namespace sluice::zero {
namespace {

Result<DeviceBuffer> AllocateState(Device& device, int64_t count, std::string_view what) {
  return AllocateZeroed(device, static_cast<size_t>(count) * sizeof(float),
                        MemoryCategory::kOptimizer, fmt::format("the optimizer's {} shard", what));
}

}  // namespace

Result<std::unique_ptr<ShardedAdam>> ShardedAdam::Create(Device& device,
                                                         const OptimizerConfig& config,
                                                         DType param_dtype, void* param_shard,
                                                         int64_t count, int num_threads) {
  if (device.kind() != DeviceKind::kCpu) {
    return UnimplementedError(
        "the ZeRO optimizer runs on the cpu device backend only for now (device {}); set "
        "device.type: cpu",
        device.name());
  }
  std::unique_ptr<ShardedAdam> adam(new ShardedAdam());
  adam->config_ = config;
  adam->param_dtype_ = param_dtype;
  adam->param_shard_ = param_shard;
  adam->count_ = count;
  adam->num_threads_ = num_threads;
  SLUICE_ASSIGN_OR_RETURN(adam->exp_avg_, AllocateState(device, count, "exp_avg"));
  SLUICE_ASSIGN_OR_RETURN(adam->exp_avg_sq_, AllocateState(device, count, "exp_avg_sq"));
  if (param_dtype == DType::kF32) {
    adam->master_ = static_cast<float*>(param_shard);
  } else {
    SLUICE_ASSIGN_OR_RETURN(adam->master_buffer_,
                            AllocateState(device, count, "fp32 master weight"));
    adam->master_ = adam->master_buffer_.data_as<float>();
  }
  return adam;
}

void ShardedAdam::LoadMasterFromParams() {
  if (param_dtype_ == DType::kF32) return;
  ConvertToF32(param_shard_, param_dtype_, master_, count_, num_threads_);
}

Status ShardedAdam::Step(const float* grads, double lr, double grad_scale) {
  const kernels::AdamHyperparams hyper = AdamHyperparamsFor(config_, lr, step_ + 1);
  kernels::AdamTensors t;
  t.params = master_;
  t.exp_avg = exp_avg_.data_as<float>();
  t.exp_avg_sq = exp_avg_sq_.data_as<float>();
  t.grads = grads;
  t.grad_type = kernels::AdamGradType::kF32;
  t.copy_type = AdamCopyTypeFor(param_dtype_);
  t.param_copy = t.copy_type == kernels::AdamCopyType::kNone ? nullptr : param_shard_;
  t.count = static_cast<size_t>(count_);
  kernels::AdamThreading threading;
  threading.num_threads = num_threads_;
  if (std::string error = kernels::AdamStepArgsError(t, hyper, threading); !error.empty()) {
    return InvalidArgumentError("ZeRO optimizer step {}: {}", hyper.step, error);
  }
  kernels::AdamStep(t, hyper, static_cast<float>(grad_scale), threading);
  ++step_;
  return OkStatus();
}

Status ShardedAdam::RestoreState(const float* master, const float* exp_avg, const float* exp_avg_sq,
                                 int64_t step) {
  if (step < 0) return InvalidArgumentError("optimizer step count {} is negative", step);
  const size_t bytes = static_cast<size_t>(count_) * sizeof(float);
  std::memmove(master_, master, bytes);
  std::memcpy(exp_avg_.data(), exp_avg, bytes);
  std::memcpy(exp_avg_sq_.data(), exp_avg_sq, bytes);
  if (param_dtype_ != DType::kF32) {
    ConvertFromF32(master_, param_shard_, param_dtype_, count_, num_threads_);
  }
  step_ = step;
  return OkStatus();
}

uint64_t ShardedAdam::state_bytes() const {
  return exp_avg_.size() + exp_avg_sq_.size() + master_buffer_.size();
}

Status RestoreShardedAdam(ShardedAdam& adam, const OptimizerStateSource& source, int64_t step) {
  const size_t count = static_cast<size_t>(adam.count());
  std::vector<float> master(count), exp_avg(count), exp_avg_sq(count);
  if (count > 0) {
    SLUICE_RETURN_IF_ERROR(
        source(0, adam.count(), master.data(), exp_avg.data(), exp_avg_sq.data()));
  }
  return adam.RestoreState(master.data(), exp_avg.data(), exp_avg_sq.data(), step);
}

}  // namespace sluice::zero
