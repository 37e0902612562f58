#include "engine/zero/sharded_adam.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "engine/zero/adam_hyperparams.h"
#include "engine/zero/lamb_step.h"
#include "engine/zero/optimizer_step.h"
#include "engine/zero/zeroed_buffer.h"

namespace sluice::zero {
namespace {

Result<DeviceBuffer> AllocateState(Stream& stream, int64_t count, std::string_view what) {
  return AllocateZeroed(stream, static_cast<size_t>(count) * sizeof(float),
                        MemoryCategory::kOptimizer, fmt::format("the optimizer's {} shard", what));
}

}  // namespace

Result<std::unique_ptr<ShardedAdam>> ShardedAdam::Create(ops::OpsBackend& ops, Stream& stream,
                                                         const OptimizerConfig& config,
                                                         DType param_dtype, void* param_shard,
                                                         int64_t count, bool param_shard_on_host,
                                                         int num_threads) {
  if (config.type == OptimizerType::kLion) SLUICE_RETURN_IF_ERROR(CheckLionOnDevice(ops));
  if (config.type == OptimizerType::kLamb) SLUICE_RETURN_IF_ERROR(CheckLambOnDevice(ops));
  std::unique_ptr<ShardedAdam> adam(new ShardedAdam());
  adam->ops_ = &ops;
  adam->config_ = config;
  adam->param_dtype_ = param_dtype;
  adam->param_shard_ = param_shard;
  adam->count_ = count;
  adam->num_threads_ = num_threads;
  SLUICE_ASSIGN_OR_RETURN(adam->exp_avg_, AllocateState(stream, count, "exp_avg"));
  if (!adam->lion()) {
    SLUICE_ASSIGN_OR_RETURN(adam->exp_avg_sq_, AllocateState(stream, count, "exp_avg_sq"));
  }
  if (param_dtype == DType::kF32) {
    adam->master_ = static_cast<float*>(param_shard);
    adam->master_on_host_ = param_shard_on_host;
  } else {
    SLUICE_ASSIGN_OR_RETURN(adam->master_buffer_,
                            AllocateState(stream, count, "fp32 master weight"));
    adam->master_ = adam->master_buffer_.data_as<float>();
  }
  return adam;
}

Tensor ShardedAdam::View(const void* data, DType dtype) const {
  return Tensor(const_cast<void*>(data), dtype, {count_}, MemoryTier::kDevice,
                ops_->device().index());
}

Status ShardedAdam::LoadMasterFromParams(Stream& stream) {
  if (param_dtype_ == DType::kF32 || count_ == 0) return OkStatus();
  return ops_->Convert(stream, View(param_shard_, param_dtype_), View(master_, DType::kF32));
}

Status ShardedAdam::Step(Stream& stream, const float* grads, double lr, double grad_scale) {
  const kernels::AdamHyperparams hyper = AdamHyperparamsFor(config_, lr, step_ + 1);
  if (config_.type == OptimizerType::kLamb) {
    if (!lamb_plan_.has_value()) {
      return FailedPreconditionError(
          "optimizer.type Lamb needs the parameters' pieces of the shard (SetLambPlan) before "
          "its first step: the trust ratio is per parameter");
    }
    const kernels::LambTensors t{.params = master_,
                                 .exp_avg = exp_avg_.data_as<float>(),
                                 .exp_avg_sq = exp_avg_sq_.data_as<float>(),
                                 .grads = grads,
                                 .param_copy = param_dtype_ == DType::kF32 ? nullptr : param_shard_,
                                 .copy_type = offload::AdamCopyTypeFor(param_dtype_),
                                 .count = static_cast<size_t>(count_)};
    Status done =
        LambShardStep(*ops_, stream, *lamb_plan_, t, LambHyperparamsFor(config_, lr, step_ + 1),
                      static_cast<float>(grad_scale), {.num_threads = num_threads_});
    if (!done.ok()) {
      return std::move(done).WithContext(fmt::format("ZeRO optimizer step {}", hyper.step));
    }
  } else if (count_ > 0 && lion()) {
    const kernels::LionTensors t{.params = master_,
                                 .exp_avg = exp_avg_.data_as<float>(),
                                 .grads = grads,
                                 .param_copy = param_dtype_ == DType::kF32 ? nullptr : param_shard_,
                                 .copy_type = offload::AdamCopyTypeFor(param_dtype_),
                                 .count = static_cast<size_t>(count_)};
    Status launched =
        EnqueueLionStep(*ops_, stream, t, LionHyperparamsFor(config_, lr),
                        static_cast<float>(grad_scale), {.num_threads = num_threads_});
    if (!launched.ok()) {
      return std::move(launched).WithContext(fmt::format("ZeRO optimizer step {}", hyper.step));
    }
  } else if (count_ > 0) {
    Status launched = ops_->AdamStep(
        stream,
        {.params = View(master_, DType::kF32),
         .exp_avg = View(exp_avg_.data(), DType::kF32),
         .exp_avg_sq = View(exp_avg_sq_.data(), DType::kF32),
         .grads = View(grads, DType::kF32),
         .param_copy = param_dtype_ == DType::kF32 ? Tensor() : View(param_shard_, param_dtype_),
         .hyper = hyper,
         .grad_scale = static_cast<float>(grad_scale)});
    if (!launched.ok()) {
      return std::move(launched).WithContext(fmt::format("ZeRO optimizer step {}", hyper.step));
    }
  }
  ++step_;
  return OkStatus();
}

Status ShardedAdam::StreamState(Stream& stream, int64_t begin, int64_t n, int64_t piece,
                                const offload::OptimizerStateSink& sink) const {
  SLUICE_RETURN_IF_ERROR(offload::CheckStateRange(begin, n, count_));
  if (n == 0) return OkStatus();
  Device& device = ops_->device();
  const int64_t chunk = std::min(n, std::max<int64_t>(piece, 1));
  std::vector<float> master(static_cast<size_t>(chunk)), exp_avg(master.size()),
      exp_avg_sq(lion() ? 0 : master.size());
  const float* sources[] = {master_, exp_avg_.data_as<float>(), exp_avg_sq_.data_as<float>()};
  float* targets[] = {master.data(), exp_avg.data(), lion() ? nullptr : exp_avg_sq.data()};
  const CopyKind kinds[] = {master_on_host_ ? CopyKind::kH2H : CopyKind::kD2H, CopyKind::kD2H,
                            CopyKind::kD2H};
  const int tensors = lion() ? 2 : 3;
  for (int64_t at = begin; at < begin + n; at += chunk) {
    const int64_t take = std::min(chunk, begin + n - at);
    for (int t = 0; t < tensors; ++t) {
      SLUICE_RETURN_IF_ERROR(device.CopyAsync(targets[t], sources[t] + at,
                                              static_cast<size_t>(take) * sizeof(float), kinds[t],
                                              stream));
    }
    SLUICE_RETURN_IF_ERROR(stream.Synchronize());
    SLUICE_RETURN_IF_ERROR(sink(at, take, master.data(), exp_avg.data(), targets[2]));
  }
  return OkStatus();
}

Status ShardedAdam::RestoreState(Stream& stream, const float* master, const float* exp_avg,
                                 const float* exp_avg_sq, int64_t step) {
  if (step < 0) return InvalidArgumentError("optimizer step count {} is negative", step);
  Device& device = ops_->device();
  const size_t bytes = static_cast<size_t>(count_) * sizeof(float);
  SLUICE_RETURN_IF_ERROR(device.CopyAsync(
      master_, master, bytes, master_on_host_ ? CopyKind::kH2H : CopyKind::kH2D, stream));
  SLUICE_RETURN_IF_ERROR(device.CopyAsync(exp_avg_.data(), exp_avg, bytes, CopyKind::kH2D, stream));
  if (!lion()) {
    SLUICE_RETURN_IF_ERROR(
        device.CopyAsync(exp_avg_sq_.data(), exp_avg_sq, bytes, CopyKind::kH2D, stream));
  }
  if (param_dtype_ != DType::kF32 && count_ > 0) {
    SLUICE_RETURN_IF_ERROR(
        ops_->Convert(stream, View(master_, DType::kF32), View(param_shard_, param_dtype_)));
  }
  SLUICE_RETURN_IF_ERROR(stream.Synchronize());  // the host arrays may go once this returns
  step_ = step;
  return OkStatus();
}

uint64_t ShardedAdam::state_bytes() const {
  return exp_avg_.size() + exp_avg_sq_.size() + master_buffer_.size();
}

Status RestoreShardedAdam(ShardedAdam& adam, Stream& stream,
                          const offload::OptimizerStateSource& source, int64_t step) {
  const size_t count = static_cast<size_t>(adam.count());
  const bool with_sq = adam.state_tensors() == 3;
  std::vector<float> master(count), exp_avg(count), exp_avg_sq(with_sq ? count : 0);
  float* sq = with_sq ? exp_avg_sq.data() : nullptr;
  if (count > 0) SLUICE_RETURN_IF_ERROR(source(0, adam.count(), master.data(), exp_avg.data(), sq));
  return adam.RestoreState(stream, master.data(), exp_avg.data(), sq, step);
}

}  // namespace sluice::zero
