#include "engine/train/device_adam.h"

#include <cstring>
#include <string>

#include "kernels/cpu/ops_convert.h"

namespace sluice::train {
namespace {

kernels::AdamHyperparams Hyperparams(const OptimizerConfig& config, double lr, int64_t step) {
  kernels::AdamHyperparams hyper;
  hyper.lr = static_cast<float>(lr);
  hyper.beta1 = static_cast<float>(config.beta1);
  hyper.beta2 = static_cast<float>(config.beta2);
  hyper.eps = static_cast<float>(config.eps);
  hyper.weight_decay = static_cast<float>(config.weight_decay);
  hyper.adamw_mode = config.adam_w_mode;
  hyper.bias_correction = true;
  hyper.step = step;
  return hyper;
}

Result<DeviceBuffer> AllocateZeroed(Device& device, int64_t count, size_t element_size,
                                    MemoryCategory category, const char* what) {
  Result<DeviceBuffer> buffer =
      device.Allocate(static_cast<size_t>(count) * element_size, category);
  if (!buffer.ok()) {
    return Status(buffer.status()).WithContext(fmt::format("allocating the optimizer's {}", what));
  }
  std::memset(buffer->data(), 0, buffer->size());
  return buffer;
}

}  // namespace

Result<std::unique_ptr<DeviceAdam>> DeviceAdam::Create(Device& device,
                                                       const OptimizerConfig& config,
                                                       Precision precision, void* model_params,
                                                       int64_t count, int num_threads) {
  if (device.kind() != DeviceKind::kCpu) {
    return UnimplementedError(
        "the optimizer runs on the cpu device backend only for now (device {}); set device.type: "
        "cpu",
        device.name());
  }
  std::string error = kernels::AdamHyperparamsError(Hyperparams(config, config.lr, 1));
  if (!error.empty()) return InvalidArgumentError("optimizer.params: {}", error);

  std::unique_ptr<DeviceAdam> adam(new DeviceAdam());
  adam->config_ = config;
  adam->precision_ = precision;
  adam->model_params_ = model_params;
  adam->count_ = count;
  adam->num_threads_ = num_threads;
  SLUICE_ASSIGN_OR_RETURN(adam->exp_avg_, AllocateZeroed(device, count, sizeof(float),
                                                         MemoryCategory::kOptimizer, "exp_avg"));
  SLUICE_ASSIGN_OR_RETURN(
      adam->exp_avg_sq_,
      AllocateZeroed(device, count, sizeof(float), MemoryCategory::kOptimizer, "exp_avg_sq"));
  if (precision == Precision::kF32) {
    adam->master_ = static_cast<float*>(model_params);
    return adam;
  }
  SLUICE_ASSIGN_OR_RETURN(adam->master_buffer_,
                          AllocateZeroed(device, count, sizeof(float), MemoryCategory::kOptimizer,
                                         "fp32 master weights"));
  adam->master_ = adam->master_buffer_.data_as<float>();
  if (precision == Precision::kBF16) {
    kernels::cpu::ConvertBf16ToF32(static_cast<const uint16_t*>(model_params), adam->master_, count,
                                   num_threads);
  } else {
    std::memcpy(adam->master_, model_params, static_cast<size_t>(count) * sizeof(float));
    SLUICE_ASSIGN_OR_RETURN(
        adam->staging_, AllocateZeroed(device, count, sizeof(uint16_t), MemoryCategory::kBuffers,
                                       "fp16 parameter staging"));
  }
  return adam;
}

Status DeviceAdam::Step(const float* grads, double lr, double grad_scale) {
  kernels::AdamTensors tensors;
  tensors.params = master_;
  tensors.exp_avg = exp_avg_.data_as<float>();
  tensors.exp_avg_sq = exp_avg_sq_.data_as<float>();
  tensors.grads = grads;
  tensors.grad_type = kernels::AdamGradType::kF32;
  tensors.copy_type = AdamCopyTypeFor(precision_);
  tensors.param_copy = precision_ == Precision::kBF16  ? model_params_
                       : precision_ == Precision::kF16 ? staging_.data()
                                                       : nullptr;
  tensors.count = static_cast<size_t>(count_);
  const kernels::AdamHyperparams hyper = Hyperparams(config_, lr, step_ + 1);
  kernels::AdamThreading threading;
  threading.num_threads = num_threads_;
  std::string error = kernels::AdamStepArgsError(tensors, hyper, threading);
  if (!error.empty()) {
    return InvalidArgumentError("optimizer step {}: {}", step_ + 1, error);
  }
  kernels::AdamStep(tensors, hyper, static_cast<float>(grad_scale), threading);
  if (precision_ == Precision::kF16) {
    kernels::cpu::ConvertF16ToF32(staging_.data_as<uint16_t>(), static_cast<float*>(model_params_),
                                  count_, num_threads_);
  }
  ++step_;
  return OkStatus();
}

uint64_t DeviceAdam::state_bytes() const {
  return master_buffer_.size() + exp_avg_.size() + exp_avg_sq_.size() + staging_.size();
}

}  // namespace sluice::train
