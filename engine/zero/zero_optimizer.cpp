#include "engine/zero/zero_optimizer.h"

#include <fmt/format.h>

#include <cstring>

#include "engine/zero/sharded_adam.h"
#include "offload/aio_engine.h"
#include "offload/swap_store.h"

namespace sluice::zero {
namespace {

class DeviceOptimizer final : public ZeroOptimizer {
 public:
  explicit DeviceOptimizer(std::unique_ptr<ShardedAdam> adam) : adam_(std::move(adam)) {}

  Status LoadMasterFromParams() override {
    adam_->LoadMasterFromParams();
    return OkStatus();
  }
  Status Step(const float* grads, double lr, double grad_scale) override {
    return adam_->Step(grads, lr, grad_scale);
  }
  Status ReadState(int64_t begin, int64_t n, float* master, float* exp_avg,
                   float* exp_avg_sq) const override {
    if (begin < 0 || n < 0 || begin + n > adam_->count()) {
      return OutOfRangeError("optimizer state range [{}, {}) is outside the shard of {} elements",
                             begin, begin + n, adam_->count());
    }
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (master != nullptr && n > 0) std::memcpy(master, adam_->master() + begin, bytes);
    if (exp_avg != nullptr && n > 0) std::memcpy(exp_avg, adam_->exp_avg() + begin, bytes);
    if (exp_avg_sq != nullptr && n > 0) {
      std::memcpy(exp_avg_sq, adam_->exp_avg_sq() + begin, bytes);
    }
    return OkStatus();
  }
  Status StreamState(int64_t begin, int64_t n, const OffloadStateSink& sink) const override {
    if (begin < 0 || n < 0 || begin + n > adam_->count()) {
      return OutOfRangeError("optimizer state range [{}, {}) is outside the shard of {} elements",
                             begin, begin + n, adam_->count());
    }
    if (n == 0) return OkStatus();
    return sink(begin, n, adam_->master() + begin, adam_->exp_avg() + begin,
                adam_->exp_avg_sq() + begin);
  }
  Status RestoreState(const float* master, const float* exp_avg, const float* exp_avg_sq,
                      int64_t step) override {
    return adam_->RestoreState(master, exp_avg, exp_avg_sq, step);
  }
  int64_t step() const override { return adam_->step(); }
  int64_t count() const override { return adam_->count(); }
  const float* master() const override { return adam_->master(); }
  bool grads_in_host_memory() const override { return false; }
  uint64_t state_bytes() const override { return adam_->state_bytes(); }

 private:
  std::unique_ptr<ShardedAdam> adam_;
};

class OffloadedOptimizer final : public ZeroOptimizer {
 public:
  Status LoadMasterFromParams() override { return adam_->LoadMasterFromParams(); }
  Status Step(const float* grads, double lr, double grad_scale) override {
    return adam_->Step(grads, lr, grad_scale);
  }
  Status ReadState(int64_t begin, int64_t n, float* master, float* exp_avg,
                   float* exp_avg_sq) const override {
    return adam_->ReadState(begin, n, master, exp_avg, exp_avg_sq);
  }
  Status StreamState(int64_t begin, int64_t n, const OffloadStateSink& sink) const override {
    return adam_->StreamState(begin, n, sink);
  }
  Status RestoreState(const float* master, const float* exp_avg, const float* exp_avg_sq,
                      int64_t step) override {
    return adam_->RestoreState(master, exp_avg, exp_avg_sq, step);
  }
  int64_t step() const override { return adam_->step(); }
  int64_t count() const override { return adam_->count(); }
  const float* master() const override { return nullptr; }
  bool grads_in_host_memory() const override { return true; }
  uint64_t state_bytes() const override { return 0; }
  uint64_t host_bytes() const override { return adam_->host_bytes(); }
  uint64_t pinned_bytes() const override { return adam_->pinned_bytes(); }
  uint64_t nvme_bytes() const override { return adam_->nvme_bytes(); }
  const OffloadStepTimings* last_step_timings() const override {
    return &adam_->last_step_timings();
  }

  // Declaration order is destruction order in reverse: the optimizer goes before its store,
  // the store before its I/O engine.
  std::unique_ptr<offload::AioEngine> aio;
  std::unique_ptr<offload::SwapStore> store;
  std::unique_ptr<OffloadedAdam> adam_;
};

offload::AioOptions AioOptionsOf(const AioConfig& aio) {
  offload::AioOptions options;
  options.block_size = static_cast<uint64_t>(aio.block_size);
  options.queue_depth = aio.queue_depth;
  options.intra_op_parallelism = aio.intra_op_parallelism;
  options.single_submit = aio.single_submit;
  options.overlap_events = aio.overlap_events;
  return options;
}

}  // namespace

Result<std::unique_ptr<ZeroOptimizer>> CreateZeroOptimizer(Device& device,
                                                           const ZeroOptions& options,
                                                           const ParamShardTarget& params,
                                                           int64_t count, int rank) {
  const OffloadOptimizerConfig& offload = options.offload_optimizer;
  if (offload.device == OffloadDevice::kNone) {
    if (params.nvme != nullptr) {
      return InvalidArgumentError(
          "zero_optimization.offload_param.device = nvme needs offload_optimizer.device cpu or "
          "nvme: an optimizer on the device keeps fp32 master weights of the whole shard there");
    }
    SLUICE_ASSIGN_OR_RETURN(
        auto adam, ShardedAdam::Create(device, options.optimizer, options.param_dtype, params.shard,
                                       count, options.num_threads));
    return std::unique_ptr<ZeroOptimizer>(std::make_unique<DeviceOptimizer>(std::move(adam)));
  }
  auto optimizer = std::make_unique<OffloadedOptimizer>();
  if (offload.device == OffloadDevice::kNvme) {
    Result<std::unique_ptr<offload::AioEngine>> aio =
        offload::AioEngine::Create(AioOptionsOf(options.aio));
    if (!aio.ok()) {
      return Status(aio.status())
          .WithContext("creating the I/O engine of zero_optimization.offload_optimizer (aio.*)");
    }
    optimizer->aio = std::move(aio).value();
    offload::SwapStoreOptions store;
    store.paths = {offload.nvme_path};
    store.rank = rank;
    store.file_name = fmt::format("sluice_optimizer.rank{}.swp", rank);
    store.remove_on_close = true;  // scratch: the state that matters goes into checkpoints
    Result<std::unique_ptr<offload::SwapStore>> created =
        offload::SwapStore::Create(*optimizer->aio, store);
    if (!created.ok()) {
      return Status(created.status())
          .WithContext(fmt::format(
              "creating the optimizer swap store in zero_optimization.offload_optimizer.nvme_path "
              "= {}",
              offload.nvme_path));
    }
    optimizer->store = std::move(created).value();
  }
  ZeroConfig zero;
  zero.offload_optimizer = offload;
  zero.sub_group_size = options.sub_group_size;
  SLUICE_ASSIGN_OR_RETURN(
      OffloadedAdamOptions adam_options,
      OffloadedAdamOptionsFromConfig(zero, optimizer->store.get(), optimizer->aio.get()));
  adam_options.host_gradients = true;
  adam_options.host_params = params.host;
  adam_options.param_store = params.nvme;
  SLUICE_ASSIGN_OR_RETURN(
      optimizer->adam_,
      OffloadedAdam::Create(device, options.optimizer, options.param_dtype, params.shard,
                            DType::kF32, count, options.num_threads, adam_options));
  return std::unique_ptr<ZeroOptimizer>(std::move(optimizer));
}

}  // namespace sluice::zero
