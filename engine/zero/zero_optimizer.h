// The optimizer behind the ZeRO engine, whichever tier holds its state: ShardedAdam (fp32 master
// weights, exp_avg and exp_avg_sq on the device) or OffloadedAdam (in host memory or on NVMe,
// zero_optimization.offload_optimizer.device cpu | nvme). Both step the same elements with the
// same kernel arithmetic, so a run's losses do not depend on the tier. Both run Adam / AdamW or
// Lion (optimizer.type; Lion keeps no exp_avg_sq, and its state streams hand out a null one).
//
//   SLUICE_ASSIGN_OR_RETURN(auto adam, CreateZeroOptimizer(ops, stream, options, params,
//                                                          count, tiers));
//   SLUICE_RETURN_IF_ERROR(adam->LoadMasterFromParams());
//   SLUICE_RETURN_IF_ERROR(adam->Step(grads, lr, clip / loss_scale));
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "engine/zero/lamb_step.h"
#include "engine/zero/zero_options.h"
#include "offload/nvme_param_store.h"
#include "offload/offloaded_adam.h"
#include "offload/rank_tiers.h"
#include "runtime/device.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"

namespace sluice::zero {

// Where the optimizer writes the updated parameters (in the parameter dtype).
struct ParamShardTarget {
  // Device memory, or host memory with `host` (offload_param cpu); null with `nvme`.
  void* shard = nullptr;
  bool host = false;
  // offload_param nvme: updated tiles are written back to the store (needs the optimizer
  // offloaded: with it on the device, its master weights would keep the shard there anyway).
  offload::NvmeParamStore* nvme = nullptr;
};

class ZeroOptimizer {
 public:
  virtual ~ZeroOptimizer() = default;

  // Master weights := the parameter shard's values widened to fp32.
  virtual Status LoadMasterFromParams() = 0;
  // Adam(grads * grad_scale) at rate `lr` over count() fp32 gradients: device memory, or host
  // memory when grads_in_host_memory(). Writes the updated parameters into the parameter shard:
  // the device part's work is enqueued on the stream the optimizer was created with (that
  // stream's later work, and whoever synchronizes it, sees the update); the offloaded part's is
  // done when Step returns.
  virtual Status Step(const float* grads, double lr, double grad_scale) = 0;
  // A hint while the model computes: state on NVMe begins loading for the next Step
  // (OffloadedAdam::PrefetchState); a no-op for the other tiers. `wait`: may block for the last
  // step's writes.
  virtual Status PrefetchState(bool wait) {
    (void)wait;
    return OkStatus();
  }
  // Copies elements [begin, begin + n) of the state to host memory (null skips a tensor).
  Status ReadState(int64_t begin, int64_t n, float* master, float* exp_avg,
                   float* exp_avg_sq) const;
  // Hands elements [begin, begin + n) of the state to `sink` in increasing order, each piece
  // valid only during its call (checkpoint streaming): pieces of at most one tile where the state
  // is tiled (offloaded and split optimizers), the whole range where it is not.
  virtual Status StreamState(int64_t begin, int64_t n,
                             const offload::OptimizerStateSink& sink) const = 0;
  // Replaces the whole state, asking `source` for it in increasing pieces of at most one tile
  // (offloaded state: a restore holds one tile in memory), and the step count; sets the parameter
  // shard from the master weights.
  virtual Status RestoreState(const offload::OptimizerStateSource& source, int64_t step) = 0;

  virtual int64_t step() const = 0;
  virtual int64_t count() const = 0;
  // Where Step wants the gradient shard: false = the device.
  virtual bool grads_in_host_memory() const = 0;
  // The fraction of the state that is offloaded: 0 on the device, 1 offloaded, a split's ratio.
  virtual double offload_ratio() const = 0;
  // Bytes of optimizer state by tier (device: ShardedAdam only).
  virtual uint64_t state_bytes() const = 0;
  virtual uint64_t host_bytes() const { return 0; }
  virtual uint64_t pinned_bytes() const { return 0; }
  virtual uint64_t nvme_bytes() const { return 0; }
  // optimizer.type Lamb (lamb_step.h): where each parameter's piece of the shard lies and how the
  // norms are summed across ranks. Only the state on the device takes it (the config refuses Lamb
  // with offload_optimizer).
  virtual Status SetLambPlan(LambPlan plan) {
    (void)plan;
    return UnimplementedError(
        "optimizer.type Lamb with zero_optimization.offload_optimizer.device cpu or nvme is not "
        "supported: set offload_optimizer.device none");
  }
  // The last step's breakdown (offloaded only; null otherwise).
  virtual const offload::OffloadStepTimings* last_step_timings() const { return nullptr; }
};

// ShardedAdam when options.offload_optimizer.device is none, else OffloadedAdam (for nvme with
// a swap store in offload_optimizer.nvme_path, file "sluice_optimizer.rank<rank>.swp", on the
// I/O engine of `tiers`, which also holds its pinned staging budget and must outlive the
// optimizer). The parameter shard `params` holds `count` values of
// options.param_dtype. Device work runs on `ops`' device, on `stream` (the engine's compute
// stream), which must outlive the optimizer.
Result<std::unique_ptr<ZeroOptimizer>> CreateZeroOptimizer(ops::OpsBackend& ops, Stream& stream,
                                                           const ZeroOptions& options,
                                                           const ParamShardTarget& params,
                                                           int64_t count,
                                                           offload::RankTiers& tiers);

}  // namespace sluice::zero
