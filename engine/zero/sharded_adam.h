// Sluice's one device optimizer wrapper: the ZeRO engine's at every stage (hence `sluice train`'s)
// and the tests' flat single-rank reference. Adam / AdamW over this rank's shard (stages 1-3) or
// the whole flat buffer (stage 0), with fp32 master weights, exp_avg and exp_avg_sq on the device
// (category optimizer), one fused Adam op of the ops backend per step (runtime/ops/ops_backend.h:
// kernels/cpu/adam.h on the cpu device), enqueued on the caller's stream; or Lion
// (optimizer.type Lion) with exp_avg only, stepped by EnqueueLionStep (optimizer_step.h: not on a
// CUDA device yet, which Create refuses); or Lamb, both moments, in two passes per step with the
// norms summed across ranks (lamb_step.h: the host waits for pass 1; cpu device only). The
// updated parameters are written in the parameter dtype into the parameter shard, the source of
// the next all-gather: in f32 the master weights are that shard itself; in bf16 / f16 the kernel
// writes the rounded copy there. Adam is elementwise, so a shard steps exactly as the same
// elements of an unsharded run would; padding elements (gradient 0, value 0) stay 0 (Lion's
// sign(0) is 0).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "engine/zero/zero_sections.h"
#include "engine/zero/lamb_step.h"
#include "offload/optimizer_state_stream.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"

namespace sluice::zero {

// Each call takes the stream it enqueues its device work on, as the ops do; the host never reads
// or writes the state itself.
class ShardedAdam {
 public:
  // `param_shard` holds `count` values of `param_dtype` in `ops`' device memory, or in host memory
  // with `param_shard_on_host` (offload_param cpu: in f32 the master weights are that host shard),
  // and must outlive the optimizer, as must `ops`. The state is zeroed on `stream` before this
  // returns. ResourceExhausted when the state does not fit the device; Unimplemented for Lion on a
  // CUDA device. `num_threads`: the CPU Lion kernel's threads (0: OpenMP's default), as the cpu
  // ops backend's own team (device.threads) runs Adam's.
  static Result<std::unique_ptr<ShardedAdam>> Create(
      ops::OpsBackend& ops, Stream& stream, const OptimizerConfig& config, DType param_dtype,
      void* param_shard, int64_t count, bool param_shard_on_host = false, int num_threads = 0);

  // Master weights := the parameter shard's values (after it was initialized or loaded), on
  // `stream`.
  Status LoadMasterFromParams(Stream& stream);
  // One step, enqueued on `stream`: update = Adam(grads * grad_scale) at rate `lr` over `count`
  // elements (`grads`: device memory); advances the bias-correction step. A skipped step must
  // not call this. Work on other streams that reads the parameter shard waits for `stream`.
  Status Step(Stream& stream, const float* grads, double lr, double grad_scale);
  // Hands elements [begin, begin + n) of the state to `sink` in host memory, in pieces of at most
  // `piece` elements, in increasing order (copied from the device on `stream`); exp_avg_sq null
  // for Lion.
  Status StreamState(Stream& stream, int64_t begin, int64_t n, int64_t piece,
                     const offload::OptimizerStateSink& sink) const;
  // Replaces the whole state (each pointer: `count` values of host memory; exp_avg_sq is not read
  // for Lion and may be null) and the step counter,
  // and sets the parameter shard to the master weights in the parameter dtype, rounded as Step()
  // writes them: a checkpoint restore (OffloadedAdam::RestoreState's counterpart). Returns once
  // done on `stream`.
  Status RestoreState(Stream& stream, const float* master, const float* exp_avg,
                      const float* exp_avg_sq, int64_t step);

  // optimizer.type Lamb: the parameters' pieces of the shard and how their norms are summed
  // across ranks (lamb_step.h); Step refuses Lamb until this was called.
  void SetLambPlan(LambPlan plan) { lamb_plan_ = std::move(plan); }

  int64_t step() const { return step_; }
  int64_t count() const { return count_; }
  // fp32 values per element in a state stream: master, exp_avg and (Adam) exp_avg_sq.
  int state_tensors() const { return lion() ? 2 : 3; }
  // Bytes of optimizer state on the device (master weights only when kept apart).
  uint64_t state_bytes() const;

 private:
  ShardedAdam() = default;

  Tensor View(const void* data, DType dtype) const;
  bool lion() const { return config_.type == OptimizerType::kLion; }

  ops::OpsBackend* ops_ = nullptr;
  OptimizerConfig config_;
  DType param_dtype_ = DType::kF32;
  void* param_shard_ = nullptr;
  int64_t count_ = 0;
  int64_t step_ = 0;
  DeviceBuffer master_buffer_;  // empty in f32
  float* master_ = nullptr;
  bool master_on_host_ = false;  // f32 with the parameter shard in host memory
  int num_threads_ = 0;          // Lion's kernel threads
  DeviceBuffer exp_avg_;
  DeviceBuffer exp_avg_sq_;  // empty for Lion
  std::optional<LambPlan> lamb_plan_;
};

// RestoreState from a source (offload/offloaded_adam.h) through host copies of the whole state: the
// device holds all of it anyway, so they are no larger than what the device already holds.
Status RestoreShardedAdam(ShardedAdam& adam, Stream& stream,
                          const offload::OptimizerStateSource& source, int64_t step);

}  // namespace sluice::zero
