// The offloaded optimizer (ZeRO-Offload / ZeRO-Infinity): the same role as ShardedAdam (Adam /
// AdamW over this rank's shard with fp32 master weights, exp_avg and exp_avg_sq; or Lion with
// fp32 master weights and exp_avg only, half the moment bytes in every tier), but the state
// lives in host memory (offload_optimizer.device cpu) or on NVMe (nvme), and the device holds
// only the parameter and gradient shards. Each step streams the shard through a pinned staging
// ring tile by tile (tile_pipeline.h):
//
//   gradient tile (device, training dtype) --D2H--> pinned slot
//   [NVMe: p|m|v (Lion: p|m) extent --read--> pinned slot]
//   fused CPU Adam (kernels/cpu/adam.h) or Lion (kernels/cpu/lion.h): unscale and clip folded
//     into grad_scale, the state updated in place, updated parameters written in the parameter
//     dtype into the slot
//   pinned slot --H2D--> parameter shard tile (device)      [NVMe: slot --write--> extent]
//
// with the read of tile g+1, the update of g and the write of g-1 overlapping. On NVMe the step's
// transfers also overlap the model's compute: PrefetchState begins reading the first tiles while
// the last micro-batch's pass runs, and (with pipeline_write) Step returns with the last tiles'
// writes in flight, which the next call that touches the state settles first. Adam is
// elementwise and every element goes through the same kernel arithmetic whatever tile or thread
// it falls in, so the result is bit-identical to ShardedAdam on the same inputs.
//
//   auto adam = OffloadedAdam::Create(device, cpu_optimizer, DType::kBF16, param_shard,
//                                     DType::kBF16, count, threads, offload_options);
//   SLUICE_RETURN_IF_ERROR((*adam)->LoadMasterFromParams());
//   SLUICE_RETURN_IF_ERROR((*adam)->Step(grad_shard, lr, clip_coefficient / loss_scale));
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/cpu/adam.h"
#include "offload/cpu_optimizer.h"
#include "offload/host_state_store.h"
#include "offload/nvme_state_store.h"
#include "offload/offloaded_adam_options.h"
#include "offload/optimizer_state_stream.h"
#include "offload/rank_tiers.h"
#include "offload/staging_ring.h"
#include "offload/tile_pipeline.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

namespace sluice::offload {

// Where one step's time went, seen from the thread that runs it. With pipelining the waits are
// the transfer time left exposed; with pipeline_read and pipeline_write off they are the whole
// transfer times (each transfer then runs alone).
struct OffloadStepTimings {
  double wall_s = 0;
  double adam_s = 0;              // the fused kernel (+ the fp32 copy into staging, host tier)
  double nvme_read_issue_s = 0;   // submitting tile reads (blocks while the rings are full)
  double nvme_read_wait_s = 0;    // waiting for tile reads, checksum verification included
  double nvme_write_issue_s = 0;  // checksumming and submitting tile writes
  double nvme_write_wait_s = 0;   // waiting for tile writes
  // offload_param nvme: handing the updated parameters to the parameter store's write-back and
  // waiting for its last writes.
  double param_write_s = 0;
  double d2h_wait_s = 0;  // waiting for gradient tiles
  double h2d_wait_s = 0;  // waiting for parameter tiles to reach the device
  int64_t tiles = 0;
  int64_t prefetched_tiles = 0;  // tiles whose state reads PrefetchState began before the step
  uint64_t nvme_bytes_read = 0;
  uint64_t nvme_bytes_written = 0;

  double nvme_read_s() const { return nvme_read_issue_s + nvme_read_wait_s; }
  double nvme_write_s() const { return nvme_write_issue_s + nvme_write_wait_s + param_write_s; }
};

class OffloadedAdam {
 public:
  // `param_shard` is device memory holding `count` values of `param_dtype` (host memory with
  // offload.host_params; null with offload.param_store); it must outlive the optimizer. Step's
  // gradients are device memory of `grad_dtype`. ResourceExhausted when the staging ring, the host
  // state or the NVMe extents do not fit (naming the tier and, on NVMe, the tile); nothing is
  // allocated on the device.
  static Result<std::unique_ptr<OffloadedAdam>> Create(
      Device& device, const CpuOptimizer& optimizer, DType param_dtype, void* param_shard,
      DType grad_dtype, int64_t count, int num_threads, const OffloadedAdamOptions& offload);
  // Settles the transfers in flight (the last step's writes, prefetched reads), then
  // unregisters the ring from the I/O engine.
  ~OffloadedAdam();

  // Master weights := the parameter shard's values widened to fp32; exp_avg and exp_avg_sq are
  // kept (zero before the first step). Must run once before the first Step.
  Status LoadMasterFromParams();
  // One step over `count` elements: Adam(grads * grad_scale) at rate `lr`; advances the
  // bias-correction step and leaves the updated parameters in the parameter shard. A failure
  // names the tile; the state may then be partly stepped (tiles before the failing one are, and
  // were stored intact), so the optimizer refuses further steps until RestoreState. On NVMe with
  // pipeline_write the last tiles' state writes may still be in flight when it returns: the next
  // Step, PrefetchState or state call waits for them first and fails (naming the tile and the
  // step) if one failed, after which the optimizer refuses steps until RestoreState.
  Status Step(const void* grads, double lr, double grad_scale);
  // Begins reading the state of the next Step's first tiles (as many as the ring reads ahead)
  // into their slots, where Step then finds them: called while the model computes, it takes the
  // reads off the step's critical path. With `wait` false a tile whose slot still holds the last
  // step's write is left for later instead of waited for. A no-op except on NVMe with
  // pipeline_read; calling it again adds only the tiles it could not begin before.
  Status PrefetchState(bool wait);

  int64_t step() const { return step_; }
  int64_t count() const { return count_; }
  // Moment tensors kept per element: 2 for Adam / AdamW, 1 for Lion.
  int moments() const { return optimizer_.moments(); }
  const TileGrid& tiles() const { return grid_; }
  const OffloadedAdamOptions& options() const { return options_; }
  const OffloadStepTimings& last_step_timings() const { return timings_; }

  // Copies elements [begin, begin + n) of the state into host memory (a null pointer skips that
  // tensor; Lion has no exp_avg_sq to copy): for checkpoints and tests. On NVMe it reads (and
  // verifies) the tiles involved.
  Status ReadState(int64_t begin, int64_t n, float* master, float* exp_avg,
                   float* exp_avg_sq) const;
  // Hands elements [begin, begin + n) of the state to `sink` in increasing order, one tile (or
  // the part of it inside the range) per call (exp_avg_sq null for Lion); the pointers are valid
  // during the call only. On
  // NVMe the reads of the next tiles are in flight (through the staging ring, at most
  // buffer_count tiles in memory) while `sink` runs, and each is verified: for checkpoints.
  Status StreamState(int64_t begin, int64_t n, const OptimizerStateSink& sink) const;
  // Replaces the whole state, tile by tile from `source` (so a restore holds one tile at a time,
  // whatever the tier), and the step counter, and sets the parameter shard to the master weights
  // in the parameter dtype: a checkpoint restore (also after a failed step).
  Status RestoreState(const OptimizerStateSource& source, int64_t step);

  // Optimizer state on the device: always 0 (ShardedAdam::state_bytes's counterpart).
  uint64_t state_bytes() const { return 0; }
  uint64_t pinned_bytes() const { return ring_.bytes(); }
  uint64_t host_bytes() const { return host_ ? host_->bytes() : 0; }
  uint64_t nvme_bytes() const { return nvme_ ? nvme_->bytes() : 0; }
  const StagingSlotLayout& slot_layout() const { return ring_.layout(); }

 private:
  struct TileState {
    float* master;
    float* exp_avg;
    float* exp_avg_sq;  // null for Lion
  };

  OffloadedAdam() = default;
  bool on_nvme() const { return nvme_ != nullptr; }
  TileState StateOf(int64_t tile, int slot) const;
  std::string DescribeTile(int64_t tile) const;
  Status TileError(int64_t tile, Status status, std::string_view doing) const;
  // `step`: the 1-based step being taken.
  TilePipelineHooks StepHooks(const void* grads, double lr, int64_t step, float grad_scale);
  // Serial, outside Step: brings tile `tile`'s state into slot 0 (NVMe) or points at it (host).
  Status FetchStateSerial(int64_t tile) const;
  Status StoreStateSerial(int64_t tile);
  // The updated parameters of `tile` (in `slot`) to the parameter shard: an async copy to the
  // device or host shard, or a write-back to the NVMe parameter store.
  Status StoreParams(int64_t tile, int slot);
  // With the NVMe parameter store: completes the write-back StoreParams began (after `status`,
  // the outcome of the stores, whatever it was). Returns the first error.
  Status FinishStoringParams(Status status);
  // The parameters of `tile` from the parameter shard (device or host memory; not an NVMe store)
  // into `landing` (host memory), synchronously.
  Status LoadParams(int64_t tile, void* landing);
  Status CheckUsable() const;
  // Waits for the write Step left in flight in `slot`, if any; counts the wait in `timings` (if
  // given). A failed write breaks the optimizer.
  Status SettleWrite(int slot, OffloadStepTimings* timings) const;
  // Every write left in flight, in tile order; returns the first failure.
  Status SettleWrites(OffloadStepTimings* timings) const;
  // Settles every transfer left in flight: the writes, and the prefetched reads (dropped).
  Status SettleInFlight() const;

  Device* device_ = nullptr;
  CpuOptimizer optimizer_;
  DType param_dtype_ = DType::kF32;
  DType grad_dtype_ = DType::kF32;
  void* param_shard_ = nullptr;
  int64_t count_ = 0;
  kernels::AdamThreading threading_;
  OffloadedAdamOptions options_;
  TileGrid grid_;
  int64_t step_ = 0;
  bool master_loaded_ = false;
  mutable Status broken_;  // also set by a failed left write, which a const reader may find

  std::unique_ptr<HostStateStore> host_;
  std::unique_ptr<NvmeStateStore> nvme_;
  StagingReservation ring_reservation_;  // from options_.staging_budget, if any
  StagingRing ring_;
  bool ring_registered_ = false;  // with options_.aio_engine as io_uring fixed buffers
  std::unique_ptr<Stream> d2h_stream_;
  std::unique_ptr<Stream> h2d_stream_;
  std::vector<std::unique_ptr<Event>> d2h_done_;  // per slot
  std::vector<std::unique_ptr<Event>> h2d_done_;  // per slot
  // What outlives a Step or PrefetchState call, settled by whichever call touches the state
  // next (the const state readers too, hence mutable): per slot, the reads and writes in flight
  // and the tile whose write Step left (-1: none); how many leading tiles are prefetched; and the
  // transfer time spent outside Step for the next one, which its timings include.
  mutable std::vector<SwapHandle> reads_;
  mutable std::vector<SwapHandle> writes_;
  mutable std::vector<int64_t> write_left_;
  mutable int64_t prefetched_ = 0;
  mutable OffloadStepTimings carried_;
  OffloadStepTimings timings_;
};

}  // namespace sluice::offload
