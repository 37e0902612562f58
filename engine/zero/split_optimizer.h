// Partial optimizer offload (zero_optimization.offload_optimizer.ratio < 1 or "auto", stage 3;
// offload_ratio.h has the rule): one ZeroOptimizer over the rank's shard made of two optimizers,
//
//   shard  [0, split)      ShardedAdam on the device: fp32 master (bf16 / f16), exp_avg,
//                          exp_avg_sq in device memory, gradients read from the device shard
//          [split, count)  OffloadedAdam (offload_optimizer.device cpu | nvme): gradient tiles
//                          copied device-to-host by it, parameters copied back
//
// Step runs the device part on its own device stream while the calling thread steps the offloaded
// part, so the two overlap (as DeepSpeed's GPU sub-groups run while CPU Adam works), and waits for
// both. Adam is elementwise and both parts run the same kernel arithmetic, and the split is on a
// tile boundary, so a step is bit-identical to everything on the device or everything offloaded.
// The gradient shard stays on the device (ZeroPlacement::grad_shard of a split). The state calls
// (StreamState, RestoreState) dispatch each range to the part(s) holding it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "engine/zero/offload_ratio.h"
#include "engine/zero/offloaded_part.h"
#include "engine/zero/sharded_adam.h"
#include "engine/zero/zero_optimizer.h"
#include "offload/aio_engine.h"
#include "offload/offloaded_adam.h"
#include "offload/swap_store.h"

namespace sluice::zero {

class SplitOptimizer final : public ZeroOptimizer {
 public:
  // `device_elements` (the first ones) on the device, the rest offloaded; either part may be
  // empty. InvalidArgument with offload_param nvme (the config refuses it first).
  static Result<std::unique_ptr<SplitOptimizer>> Create(ops::OpsBackend& ops,
                                                        const ZeroOptions& options,
                                                        const ParamShardTarget& params,
                                                        int64_t count, int64_t device_elements,
                                                        offload::RankTiers& tiers);
  ~SplitOptimizer() override;

  Status LoadMasterFromParams() override;
  // `grads`: the device fp32 gradient shard. After a failure of either part the optimizer
  // refuses further steps until RestoreState.
  Status Step(const float* grads, double lr, double grad_scale) override;
  Status PrefetchState(bool wait) override {
    return offloaded_part_.adam != nullptr ? offloaded_part_.adam->PrefetchState(wait) : OkStatus();
  }
  Status StreamState(int64_t begin, int64_t n,
                     const offload::OptimizerStateSink& sink) const override;
  Status RestoreState(const offload::OptimizerStateSource& source, int64_t step) override;

  int64_t step() const override { return step_; }
  int64_t count() const override { return count_; }
  bool grads_in_host_memory() const override { return false; }
  uint64_t state_bytes() const override;
  uint64_t host_bytes() const override;
  uint64_t pinned_bytes() const override;
  uint64_t nvme_bytes() const override;
  // The offloaded part's last step (null when it is empty).
  const offload::OffloadStepTimings* last_step_timings() const override;

  // The split: elements [0, device_elements()) on the device.
  int64_t device_elements() const { return device_elements_; }
  // The offloaded fraction, whole tiles.
  double offload_ratio() const override { return OffloadedFractionOf(count_, device_elements_); }
  // What ratio "auto" measured and chose (absent for a configured ratio).
  const std::optional<OffloadRatioChoice>& auto_choice() const { return auto_choice_; }
  void set_auto_choice(OffloadRatioChoice choice) { auto_choice_ = std::move(choice); }
  // Seconds of the device part's last step, on its stream (overlapping the offloaded part's).
  double last_device_step_s() const { return device_step_s_; }

 private:
  SplitOptimizer() = default;
  Status CheckUsable() const;

  Device* device_ = nullptr;
  int64_t count_ = 0;
  int64_t device_elements_ = 0;
  int64_t tile_elements_ = 0;
  int64_t step_ = 0;
  Status broken_;
  std::optional<OffloadRatioChoice> auto_choice_;
  double device_step_s_ = 0;
  int64_t device_start_ns_ = 0;               // written and read on stream_
  std::unique_ptr<ShardedAdam> device_part_;  // null when empty
  OffloadedPart offloaded_part_;              // adam null when empty
  std::unique_ptr<Stream> stream_;            // the device part's steps
};

// For a partial offload (OffloadOptimizerConfig::partial()): the SplitOptimizer for
// options.offload_optimizer.ratio, or for "auto" the ratio ResolveAutoOffloadRatio chooses
// (measured here, on this rank).
Result<std::unique_ptr<ZeroOptimizer>> CreateSplitOptimizer(ops::OpsBackend& ops,
                                                            const ZeroOptions& options,
                                                            const ParamShardTarget& params,
                                                            int64_t count,
                                                            offload::RankTiers& tiers);

}  // namespace sluice::zero
