#include "offload/offloaded_adam.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "offload/aio_engine.h"
#include "offload/dtype_convert.h"
#include "offload/nvme_param_store.h"
#include "runtime/logging.h"
#include "runtime/trace.h"

namespace sluice::offload {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// SecondsSince, also recorded in the trace lane (when tracing) so that `sluice bench step` shows
// the step's timed parts on the queues they belong to. steady_clock is the trace clock.
double TracedSecondsSince(Clock::time_point start, std::string_view lane, std::string_view what,
                          int64_t tile) {
  const Clock::time_point end = Clock::now();
  TraceRecorder& trace = TraceRecorder::Global();
  if (trace.enabled()) {
    auto ns = [](Clock::time_point t) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    };
    trace.Record(lane, fmt::format("{} tile {}", what, tile), ns(start), ns(end));
  }
  return std::chrono::duration<double>(end - start).count();
}

void* Offset(void* base, int64_t elements, size_t element_size) {
  return static_cast<std::byte*>(base) + static_cast<size_t>(elements) * element_size;
}
const void* Offset(const void* base, int64_t elements, size_t element_size) {
  return static_cast<const std::byte*>(base) + static_cast<size_t>(elements) * element_size;
}

TilePipelineOptions PipelineOptionsOf(const OffloadedAdamOptions& options) {
  TilePipelineOptions pipeline;
  pipeline.buffer_count = options.buffer_count;
  pipeline.pipeline_read = options.pipeline_read;
  pipeline.pipeline_write = options.pipeline_write;
  return pipeline;
}

}  // namespace

Result<std::unique_ptr<OffloadedAdam>> OffloadedAdam::Create(
    Device& device, const CpuOptimizer& optimizer, DType param_dtype, void* param_shard,
    DType grad_dtype, int64_t count, int num_threads, const OffloadedAdamOptions& offload) {
  SLUICE_RETURN_IF_ERROR(ValidateOffloadedAdamOptions(offload));
  if (count < 0) return InvalidArgumentError("optimizer shard of {} elements", count);
  if (count > 0 && (param_shard == nullptr) == (offload.param_store == nullptr)) {
    return InvalidArgumentError(
        "the offloaded optimizer needs a parameter shard or an NVMe parameter store (one only)");
  }
  std::unique_ptr<OffloadedAdam> adam(new OffloadedAdam());
  adam->device_ = &device;
  adam->optimizer_ = optimizer;
  adam->param_dtype_ = param_dtype;
  adam->grad_dtype_ = grad_dtype;
  adam->param_shard_ = param_shard;
  adam->count_ = count;
  adam->threading_.num_threads = num_threads;
  adam->options_ = offload;
  adam->grid_ = TileGrid{count, offload.tile_elements};
  if (std::string error = kernels::AdamThreadingError(adam->threading_); !error.empty()) {
    return InvalidArgumentError("optimizer threads: {}", error);
  }

  const bool nvme = offload.tier == OptimizerStateTier::kNvme;
  if (nvme) {
    SLUICE_ASSIGN_OR_RETURN(
        adam->nvme_, NvmeStateStore::Create(*offload.swap_store, adam->grid_, adam->moments()));
  } else {
    SLUICE_ASSIGN_OR_RETURN(adam->host_, HostStateStore::Create(adam->grid_, offload.numa_node,
                                                                adam->threading_, adam->moments()));
  }
  const StagingSlotLayout layout =
      ComputeStagingSlotLayout(std::max<int64_t>(adam->grid_.max_length(), 1), grad_dtype,
                               param_dtype, nvme, adam->moments());
  SLUICE_ASSIGN_OR_RETURN(
      adam->ring_reservation_,
      StagingReservation::Make(offload.staging_budget,
                               layout.slot_bytes * static_cast<uint64_t>(offload.buffer_count),
                               "the offloaded optimizer's staging ring "
                               "(zero_optimization.offload_optimizer.buffer_count tiles)"));
  SLUICE_ASSIGN_OR_RETURN(adam->ring_, StagingRing::Create(device, layout, offload.buffer_count));
  if (nvme && offload.aio_engine != nullptr) {
    adam->ring_registered_ =
        offload.aio_engine->RegisterBuffer(adam->ring_.base(), adam->ring_.bytes());
  }
  SLUICE_ASSIGN_OR_RETURN(adam->d2h_stream_, device.CreateStream());
  SLUICE_ASSIGN_OR_RETURN(adam->h2d_stream_, device.CreateStream());
  for (int slot = 0; slot < offload.buffer_count; ++slot) {
    SLUICE_ASSIGN_OR_RETURN(auto d2h, device.CreateEvent());
    SLUICE_ASSIGN_OR_RETURN(auto h2d, device.CreateEvent());
    adam->d2h_done_.push_back(std::move(d2h));
    adam->h2d_done_.push_back(std::move(h2d));
  }
  adam->reads_.resize(static_cast<size_t>(offload.buffer_count));
  adam->writes_.resize(static_cast<size_t>(offload.buffer_count));
  adam->write_left_.assign(static_cast<size_t>(offload.buffer_count), -1);
  SLUICE_LOG(kDebug, "offload",
             "{} state of {} elements on {} ({}) in {} tiles of {}; pinned ring {} x {} bytes{}",
             optimizer.name, count, OptimizerStateTierName(offload.tier),
             nvme ? "one swap extent per tile" : adam->host_->placement(), adam->grid_.num_tiles(),
             offload.tile_elements, offload.buffer_count, layout.slot_bytes,
             adam->ring_registered_ ? ", registered with io_uring" : "");
  return adam;
}

OffloadedAdam::~OffloadedAdam() {
  if (Status settled = SettleInFlight(); !settled.ok()) {
    SLUICE_LOG(kError, "offload", "{}", settled.ToString());
  }
  // After a failure, the transfers its settling left.
  for (SwapHandle& handle : reads_) (void)handle.Wait();
  for (SwapHandle& handle : writes_) (void)handle.Wait();
  if (d2h_stream_) (void)d2h_stream_->Synchronize();
  if (h2d_stream_) (void)h2d_stream_->Synchronize();
  if (ring_registered_) options_.aio_engine->UnregisterBuffer(ring_.base());
}

std::string OffloadedAdam::DescribeTile(int64_t tile) const {
  return fmt::format("tile {} of {} (elements [{}, {}) of the shard)", tile, grid_.num_tiles(),
                     grid_.begin(tile), grid_.begin(tile) + grid_.length(tile));
}

Status OffloadedAdam::TileError(int64_t tile, Status status, std::string_view doing) const {
  if (status.ok()) return status;
  return std::move(status).WithContext(fmt::format("offloaded optimizer ({}), {} {}",
                                                   OptimizerStateTierName(options_.tier), doing,
                                                   DescribeTile(tile)));
}

Status OffloadedAdam::CheckUsable() const {
  if (!broken_.ok()) {
    return FailedPreconditionError(
        "the offloaded optimizer is unusable since a step failed part-way (its state is partly "
        "stepped); restore it from a checkpoint (RestoreState). The failure: {}",
        broken_.ToString());
  }
  return OkStatus();
}

Status OffloadedAdam::SettleWrite(int slot, OffloadStepTimings* timings) const {
  const int64_t tile = write_left_[static_cast<size_t>(slot)];
  if (tile < 0) return OkStatus();
  write_left_[static_cast<size_t>(slot)] = -1;
  const Clock::time_point start = Clock::now();
  Status written = writes_[slot].Wait();
  writes_[slot] = SwapHandle();
  const double waited = TracedSecondsSince(start, kTraceLaneNvme, "left write wait", tile);
  if (timings != nullptr) timings->nvme_write_wait_s += waited;
  if (!written.ok()) {
    // The stored state is not what the step computed: as a step that failed part-way.
    broken_ = TileError(tile, std::move(written), "writing the state of")
                  .WithContext(fmt::format("optimizer step {}", step_));
    return broken_;
  }
  return OkStatus();
}

Status OffloadedAdam::SettleWrites(OffloadStepTimings* timings) const {
  // In tile order, so that the first failing tile is the one reported.
  std::vector<int> slots;
  // (write_left_ is empty in an optimizer whose Create failed.)
  for (size_t slot = 0; slot < write_left_.size(); ++slot) {
    if (write_left_[slot] >= 0) slots.push_back(static_cast<int>(slot));
  }
  std::sort(slots.begin(), slots.end(), [this](int a, int b) {
    return write_left_[static_cast<size_t>(a)] < write_left_[static_cast<size_t>(b)];
  });
  Status first;
  for (int slot : slots) {
    if (Status settled = SettleWrite(slot, timings); first.ok()) first = std::move(settled);
  }
  return first;
}

Status OffloadedAdam::SettleInFlight() const {
  Status first = SettleWrites(nullptr);
  for (int64_t tile = 0; tile < prefetched_; ++tile) {
    const size_t slot = static_cast<size_t>(tile % options_.buffer_count);
    (void)reads_[slot].Wait();  // dropped: whoever needs the tile reads it again
    reads_[slot] = SwapHandle();
  }
  prefetched_ = 0;
  return first;
}

Status OffloadedAdam::PrefetchState(bool wait) {
  if (!on_nvme() || !options_.pipeline_read || !master_loaded_ || !broken_.ok()) {
    return OkStatus();
  }
  const int64_t ahead =
      std::min<int64_t>(grid_.num_tiles(), TileReadAhead(PipelineOptionsOf(options_)) + 1);
  for (; prefetched_ < ahead; ++prefetched_) {
    const int64_t tile = prefetched_;
    const int slot = static_cast<int>(tile % options_.buffer_count);
    if (!wait && write_left_[static_cast<size_t>(slot)] >= 0 && !writes_[slot].Poll()) break;
    SLUICE_RETURN_IF_ERROR(SettleWrite(slot, &carried_));
    const Clock::time_point start = Clock::now();
    reads_[slot] = nvme_->ReadAsync(tile, ring_.state(slot));
    carried_.nvme_read_issue_s += TracedSecondsSince(start, kTraceLaneNvme, "prefetch", tile);
    carried_.nvme_bytes_read += nvme_->TileBytes(tile);
  }
  return OkStatus();
}

OffloadedAdam::TileState OffloadedAdam::StateOf(int64_t tile, int slot) const {
  if (on_nvme()) {
    float* state = ring_.state(slot);
    const int64_t n = grid_.length(tile);
    return {state, state + n, moments() == 2 ? state + 2 * n : nullptr};
  }
  const int64_t begin = grid_.begin(tile);
  return {host_->master() + begin, host_->exp_avg() + begin,
          moments() == 2 ? host_->exp_avg_sq() + begin : nullptr};
}

Status OffloadedAdam::StoreParams(int64_t tile, int slot) {
  const size_t size = DTypeSize(param_dtype_);
  const void* source = ring_.layout().params_bytes == 0
                           ? static_cast<const void*>(ring_.state(slot))
                           : ring_.params(slot);
  if (options_.param_store != nullptr) {
    // Copied into the store's own staging before this returns: no event to record.
    const Clock::time_point start = Clock::now();
    Status written = options_.param_store->WriteBack(grid_.begin(tile), grid_.length(tile), source);
    timings_.param_write_s += TracedSecondsSince(start, kTraceLaneNvme, "param write-back", tile);
    return written;
  }
  SLUICE_RETURN_IF_ERROR(device_->CopyAsync(Offset(param_shard_, grid_.begin(tile), size), source,
                                            static_cast<size_t>(grid_.length(tile)) * size,
                                            options_.host_params ? CopyKind::kH2H : CopyKind::kH2D,
                                            *h2d_stream_));
  return h2d_done_[slot]->Record(*h2d_stream_);
}

Status OffloadedAdam::FinishStoringParams(Status status) {
  if (options_.param_store == nullptr) return status;
  // Also after a failure: it releases the store's staging of the group left incomplete.
  const Clock::time_point start = Clock::now();
  Status finished = options_.param_store->FinishWriteBack();
  timings_.param_write_s +=
      TracedSecondsSince(start, kTraceLaneNvme, "param write-back wait", grid_.num_tiles() - 1);
  return status.ok() ? finished : status;
}

Status OffloadedAdam::LoadParams(int64_t tile, void* landing) {
  const size_t size = DTypeSize(param_dtype_);
  const int64_t n = grid_.length(tile);
  Status copied = device_->CopyAsync(
      landing, Offset(param_shard_, grid_.begin(tile), size), static_cast<size_t>(n) * size,
      options_.host_params ? CopyKind::kH2H : CopyKind::kD2H, *d2h_stream_);
  if (copied.ok()) copied = d2h_stream_->Synchronize();
  return copied;
}

TilePipelineHooks OffloadedAdam::StepHooks(const void* grads, double lr, int64_t step,
                                           float grad_scale) {
  TilePipelineHooks hooks;
  const size_t grad_size = DTypeSize(grad_dtype_);
  hooks.begin_fetch = [this, grads, grad_size](int64_t tile, int slot) -> Status {
    if (on_nvme() && tile >= prefetched_) {
      const Clock::time_point start = Clock::now();
      reads_[slot] = nvme_->ReadAsync(tile, ring_.state(slot));
      timings_.nvme_read_issue_s += TracedSecondsSince(start, kTraceLaneNvme, "read issue", tile);
      timings_.nvme_bytes_read += nvme_->TileBytes(tile);
    }
    if (options_.host_gradients) return OkStatus();  // read in place by `compute`
    Status copied = device_->CopyAsync(
        ring_.grads(slot), Offset(grads, grid_.begin(tile), grad_size),
        static_cast<size_t>(grid_.length(tile)) * grad_size, CopyKind::kD2H, *d2h_stream_);
    if (copied.ok()) copied = d2h_done_[slot]->Record(*d2h_stream_);
    return TileError(tile, std::move(copied), "copying the gradients of");
  };
  hooks.finish_fetch = [this](int64_t tile, int slot) -> Status {
    Clock::time_point start = Clock::now();
    Status read = reads_[slot].Wait();
    reads_[slot] = SwapHandle();
    timings_.nvme_read_wait_s += TracedSecondsSince(start, kTraceLaneNvme, "read wait", tile);
    start = Clock::now();
    Status copied = options_.host_gradients ? OkStatus() : d2h_done_[slot]->Synchronize();
    timings_.d2h_wait_s += TracedSecondsSince(start, kTraceLaneD2H, "grads wait", tile);
    if (!read.ok()) return TileError(tile, std::move(read), "reading the state of");
    return TileError(tile, std::move(copied), "copying the gradients of");
  };
  hooks.compute = [this, grads, grad_size, lr, step, grad_scale](int64_t tile, int slot) -> Status {
    const Clock::time_point start = Clock::now();
    const TileState state = StateOf(tile, slot);
    kernels::AdamTensors t;
    t.params = state.master;
    t.exp_avg = state.exp_avg;
    t.exp_avg_sq = state.exp_avg_sq;
    t.grads = options_.host_gradients ? Offset(grads, grid_.begin(tile), grad_size)
                                      : static_cast<const void*>(ring_.grads(slot));
    t.grad_type = AdamGradTypeFor(grad_dtype_);
    t.copy_type = AdamCopyTypeFor(param_dtype_);
    t.param_copy = t.copy_type == kernels::AdamCopyType::kNone ? nullptr : ring_.params(slot);
    t.count = static_cast<size_t>(grid_.length(tile));
    if (std::string error = CpuOptimizerStepError(optimizer_, t, lr, step, threading_);
        !error.empty()) {
      return TileError(tile, InvalidArgumentError("optimizer step {}: {}", step, error),
                       "updating");
    }
    CpuOptimizerStep(optimizer_, t, lr, step, grad_scale, threading_);
    if (param_dtype_ == DType::kF32 && ring_.layout().params_bytes != 0) {
      std::memcpy(ring_.params(slot), state.master, t.count * sizeof(float));
    }
    timings_.adam_s += TracedSecondsSince(start, kTraceLaneCpuAdam, "adam", tile);
    return OkStatus();
  };
  hooks.begin_store = [this](int64_t tile, int slot) -> Status {
    SLUICE_RETURN_IF_ERROR(TileError(tile, StoreParams(tile, slot), "storing the parameters of"));
    if (on_nvme()) {
      const Clock::time_point start = Clock::now();
      writes_[slot] = nvme_->WriteAsync(tile, ring_.state(slot));
      timings_.nvme_write_issue_s += TracedSecondsSince(start, kTraceLaneNvme, "write issue", tile);
      timings_.nvme_bytes_written += nvme_->TileBytes(tile);
    }
    return OkStatus();
  };
  if (on_nvme() && options_.pipeline_write) {
    hooks.detach_store = [this](int64_t tile, int slot) -> Status {
      const Clock::time_point start = Clock::now();
      Status copied = h2d_done_[slot]->Synchronize();
      timings_.h2d_wait_s += TracedSecondsSince(start, kTraceLaneH2D, "params wait", tile);
      write_left_[static_cast<size_t>(slot)] = tile;
      return TileError(tile, std::move(copied), "copying the parameters of");
    };
  }
  hooks.finish_store = [this](int64_t tile, int slot) -> Status {
    Clock::time_point start = Clock::now();
    Status written = writes_[slot].Wait();
    writes_[slot] = SwapHandle();
    timings_.nvme_write_wait_s += TracedSecondsSince(start, kTraceLaneNvme, "write wait", tile);
    start = Clock::now();
    Status copied = h2d_done_[slot]->Synchronize();
    timings_.h2d_wait_s += TracedSecondsSince(start, kTraceLaneH2D, "params wait", tile);
    if (!written.ok()) return TileError(tile, std::move(written), "writing the state of");
    return TileError(tile, std::move(copied), "copying the parameters of");
  };
  return hooks;
}

Status OffloadedAdam::Step(const void* grads, double lr, double grad_scale) {
  SLUICE_RETURN_IF_ERROR(CheckUsable());
  if (!master_loaded_) {
    return FailedPreconditionError(
        "offloaded optimizer step before its master weights were set: call "
        "LoadMasterFromParams() or RestoreState() first");
  }
  if (count_ > 0 && grads == nullptr) {
    return InvalidArgumentError("offloaded optimizer step without gradients");
  }
  const int64_t step = step_ + 1;

  // The transfers of PrefetchState, and the writes the last step left, count to this step.
  timings_ = carried_;
  carried_ = OffloadStepTimings();
  timings_.tiles = grid_.num_tiles();
  const Clock::time_point start = Clock::now();
  SLUICE_RETURN_IF_ERROR(SettleWrites(&timings_));
  const TilePipelineHooks hooks = StepHooks(grads, lr, step, static_cast<float>(grad_scale));
  timings_.prefetched_tiles = prefetched_;
  Status status =
      FinishStoringParams(RunTilePipeline(grid_.num_tiles(), PipelineOptionsOf(options_), hooks));
  if (!status.ok()) {
    // Prefetched reads of tiles the aborted pipeline never reached.
    for (SwapHandle& read : reads_) {
      (void)read.Wait();
      read = SwapHandle();
    }
  }
  prefetched_ = 0;
  timings_.wall_s = SecondsSince(start);
  if (!status.ok()) {
    broken_ = status;
    return std::move(status).WithContext(fmt::format("optimizer step {}", step));
  }
  ++step_;
  return OkStatus();
}

Status OffloadedAdam::FetchStateSerial(int64_t tile) const {
  if (!on_nvme()) return OkStatus();
  return TileError(tile, nvme_->ReadAsync(tile, ring_.state(0)).Wait(), "reading the state of");
}

Status OffloadedAdam::StoreStateSerial(int64_t tile) {
  if (!on_nvme()) return OkStatus();
  return TileError(tile, nvme_->WriteAsync(tile, ring_.state(0)).Wait(), "writing the state of");
}

Status OffloadedAdam::LoadMasterFromParams() {
  SLUICE_RETURN_IF_ERROR(SettleInFlight());
  SLUICE_RETURN_IF_ERROR(CheckUsable());
  // Before the first store of an NVMe tile there are no moments to keep: they start at zero.
  const bool keep_moments = on_nvme() && master_loaded_;
  // Parameters on NVMe are read a group at a time: read tile by tile, a group spanning k tiles
  // would be read k times. Windows as large as the largest group read each group at most twice.
  const size_t size = DTypeSize(param_dtype_);
  std::vector<std::byte> window;
  int64_t window_begin = 0;
  int64_t window_end = 0;
  auto load_params = [&](int64_t tile, void* landing) -> Status {
    NvmeParamStore* store = options_.param_store;
    if (store == nullptr) return LoadParams(tile, landing);
    const int64_t begin = grid_.begin(tile);
    const int64_t n = grid_.length(tile);
    if (begin < window_begin || begin + n > window_end) {
      window_begin = begin;
      window_end = std::min(count_, begin + std::max(n, store->slot_elements()));
      window.resize(static_cast<size_t>(window_end - window_begin) * size);
      SLUICE_RETURN_IF_ERROR(
          store->ReadRange(window_begin, window_end - window_begin, window.data()));
    }
    std::memcpy(landing, window.data() + static_cast<size_t>(begin - window_begin) * size,
                static_cast<size_t>(n) * size);
    return OkStatus();
  };
  for (int64_t tile = 0; tile < grid_.num_tiles(); ++tile) {
    const int64_t n = grid_.length(tile);
    if (keep_moments) SLUICE_RETURN_IF_ERROR(FetchStateSerial(tile));
    const TileState state = StateOf(tile, 0);
    if (on_nvme() && !keep_moments) {
      std::memset(state.exp_avg, 0, static_cast<size_t>(moments() * n) * sizeof(float));
    }
    // fp32 on NVMe has no parameter region: the copy lands in p directly.
    void* landing = ring_.layout().params_bytes == 0 ? static_cast<void*>(state.master)
                                                     : static_cast<void*>(ring_.params(0));
    SLUICE_RETURN_IF_ERROR(
        TileError(tile, load_params(tile, landing), "loading the parameters of"));
    if (landing != state.master) {
      ConvertToF32(landing, param_dtype_, state.master, n, threading_.num_threads);
    }
    SLUICE_RETURN_IF_ERROR(StoreStateSerial(tile));
  }
  master_loaded_ = true;
  return OkStatus();
}

Status OffloadedAdam::ReadState(int64_t begin, int64_t n, float* master, float* exp_avg,
                                float* exp_avg_sq) const {
  return StreamState(begin, n, StateArraysSink(begin, master, exp_avg, exp_avg_sq));
}

Status OffloadedAdam::RestoreState(const OptimizerStateSource& source, int64_t step) {
  // No CheckUsable(): replacing the whole state is how a failed step is recovered from (also
  // from a failed left write, whose error is not kept).
  if (step < 0) return InvalidArgumentError("restoring the optimizer at step {}", step);
  (void)SettleInFlight();
  for (int64_t tile = 0; tile < grid_.num_tiles(); ++tile) {
    const int64_t n = grid_.length(tile);
    const TileState state = StateOf(tile, 0);
    Status stored = source(grid_.begin(tile), n, state.master, state.exp_avg, state.exp_avg_sq);
    if (stored.ok() && ring_.layout().params_bytes != 0) {
      ConvertFromF32(state.master, ring_.params(0), param_dtype_, n, threading_.num_threads);
    }
    if (stored.ok()) stored = StoreStateSerial(tile);
    if (stored.ok()) stored = StoreParams(tile, 0);
    if (stored.ok()) stored = h2d_stream_->Synchronize();
    if (!stored.ok()) {
      // The tiles before this one hold the new state, the rest the old: no step may mix them.
      broken_ = FinishStoringParams(TileError(tile, std::move(stored), "restoring"));
      return broken_;
    }
  }
  if (Status finished = FinishStoringParams(OkStatus()); !finished.ok()) {
    broken_ = std::move(finished);
    return broken_;
  }
  step_ = step;
  master_loaded_ = true;
  broken_ = OkStatus();
  return OkStatus();
}

}  // namespace sluice::offload
