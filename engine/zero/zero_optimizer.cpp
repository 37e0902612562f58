#include "engine/zero/zero_optimizer.h"

#include <cstring>

#include "engine/zero/offload_options.h"
#include "engine/zero/offloaded_part.h"
#include "engine/zero/sharded_adam.h"
#include "engine/zero/split_optimizer.h"
#include "runtime/check.h"

namespace sluice::zero {
namespace {

class DeviceOptimizer final : public ZeroOptimizer {
 public:
  // `piece`: elements per host copy when the state is streamed out (one offload tile).
  DeviceOptimizer(std::unique_ptr<ShardedAdam> adam, Stream& stream, int64_t piece)
      : adam_(std::move(adam)), stream_(&stream), piece_(piece) {}

  Status LoadMasterFromParams() override { return adam_->LoadMasterFromParams(*stream_); }
  Status Step(const float* grads, double lr, double grad_scale) override {
    return adam_->Step(*stream_, grads, lr, grad_scale);
  }
  Status StreamState(int64_t begin, int64_t n,
                     const offload::OptimizerStateSink& sink) const override {
    return adam_->StreamState(*stream_, begin, n, piece_, sink);
  }
  Status RestoreState(const offload::OptimizerStateSource& source, int64_t step) override {
    return RestoreShardedAdam(*adam_, *stream_, source, step);
  }
  Status SetLambPlan(LambPlan plan) override {
    adam_->SetLambPlan(std::move(plan));
    return OkStatus();
  }
  int64_t step() const override { return adam_->step(); }
  int64_t count() const override { return adam_->count(); }
  bool grads_in_host_memory() const override { return false; }
  double offload_ratio() const override { return 0.0; }
  uint64_t state_bytes() const override { return adam_->state_bytes(); }

 private:
  std::unique_ptr<ShardedAdam> adam_;
  Stream* stream_;
  int64_t piece_;
};

class OffloadedOptimizer final : public ZeroOptimizer {
 public:
  explicit OffloadedOptimizer(OffloadedPart part) : part_(std::move(part)) {}

  Status LoadMasterFromParams() override { return part_.adam->LoadMasterFromParams(); }
  Status Step(const float* grads, double lr, double grad_scale) override {
    return part_.adam->Step(grads, lr, grad_scale);
  }
  Status PrefetchState(bool wait) override { return part_.adam->PrefetchState(wait); }
  Status StreamState(int64_t begin, int64_t n,
                     const offload::OptimizerStateSink& sink) const override {
    return part_.adam->StreamState(begin, n, sink);
  }
  Status RestoreState(const offload::OptimizerStateSource& source, int64_t step) override {
    return part_.adam->RestoreState(source, step);
  }
  int64_t step() const override { return part_.adam->step(); }
  int64_t count() const override { return part_.adam->count(); }
  bool grads_in_host_memory() const override { return true; }
  double offload_ratio() const override { return 1.0; }
  uint64_t state_bytes() const override { return 0; }
  uint64_t host_bytes() const override { return part_.adam->host_bytes(); }
  uint64_t pinned_bytes() const override { return part_.adam->pinned_bytes(); }
  uint64_t nvme_bytes() const override { return part_.adam->nvme_bytes(); }
  const offload::OffloadStepTimings* last_step_timings() const override {
    return &part_.adam->last_step_timings();
  }

 private:
  OffloadedPart part_;
};

}  // namespace

Status ZeroOptimizer::ReadState(int64_t begin, int64_t n, float* master, float* exp_avg,
                                float* exp_avg_sq) const {
  return StreamState(begin, n, offload::StateArraysSink(begin, master, exp_avg, exp_avg_sq));
}

Result<std::unique_ptr<ZeroOptimizer>> CreateZeroOptimizer(ops::OpsBackend& ops, Stream& stream,
                                                           const ZeroOptions& options,
                                                           const ParamShardTarget& params,
                                                           int64_t count,
                                                           offload::RankTiers& tiers) {
  Device& device = ops.device();
  // Partial offload (ratio < 1 or "auto"): split_optimizer.h.
  if (options.offload_optimizer.partial()) {
    return CreateSplitOptimizer(ops, options, params, count, tiers);
  }
  const OffloadOptimizerConfig& offload = options.offload_optimizer;
  if (offload.device == OffloadDevice::kNone) {
    SLUICE_CHECK(params.nvme == nullptr)
        << "the config refuses offload_param nvme with the optimizer on the device";
    SLUICE_ASSIGN_OR_RETURN(const int64_t piece,
                            CheckedOffloadTileElements(options.sub_group_size));
    SLUICE_ASSIGN_OR_RETURN(
        auto adam, ShardedAdam::Create(ops, stream, options.optimizer, options.param_dtype,
                                       params.shard, count, params.host, options.num_threads));
    return std::unique_ptr<ZeroOptimizer>(
        std::make_unique<DeviceOptimizer>(std::move(adam), stream, piece));
  }
  // The whole shard offloaded: the engine keeps the fp32 gradient shard in host memory, where
  // the optimizer reads it in place.
  SLUICE_ASSIGN_OR_RETURN(OffloadedPart part,
                          CreateOffloadedPart(device, options, params, /*host_gradients=*/true,
                                              count, tiers, "sluice_optimizer"));
  return std::unique_ptr<ZeroOptimizer>(std::make_unique<OffloadedOptimizer>(std::move(part)));
}

}  // namespace sluice::zero
