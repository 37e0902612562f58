#include "engine/zero/split_optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "engine/zero/offload_options.h"
#include "runtime/logging.h"
#include "runtime/trace.h"

namespace sluice::zero {
namespace {

void* Offset(void* base, int64_t elements, DType dtype) {
  if (base == nullptr) return nullptr;
  return static_cast<std::byte*>(base) + static_cast<size_t>(elements) * DTypeSize(dtype);
}

}  // namespace

Result<std::unique_ptr<SplitOptimizer>> SplitOptimizer::Create(
    ops::OpsBackend& ops, const ZeroOptions& options, const ParamShardTarget& params, int64_t count,
    int64_t device_elements, offload::RankTiers& tiers) {
  if (params.nvme != nullptr) {
    return InvalidArgumentError(
        "zero_optimization.offload_optimizer.ratio < 1 cannot be combined with "
        "zero_optimization.offload_param.device = nvme; set the ratio to 1");
  }
  if (options.offload_optimizer.device == OffloadDevice::kNone) {
    return InvalidArgumentError(
        "a partial optimizer offload needs zero_optimization.offload_optimizer.device cpu or nvme");
  }
  if (count < 0 || device_elements < 0 || device_elements > count) {
    return InvalidArgumentError("split of {} device elements in a shard of {}", device_elements,
                                count);
  }
  SLUICE_ASSIGN_OR_RETURN(const int64_t tile, CheckedOffloadTileElements(options.sub_group_size));
  if (device_elements != count && device_elements % tile != 0) {
    return InvalidArgumentError(
        "the split of the optimizer state at element {} is not on a tile boundary (tiles of {})",
        device_elements, tile);
  }
  Device& device = ops.device();
  std::unique_ptr<SplitOptimizer> split(new SplitOptimizer());
  split->device_ = &device;
  split->count_ = count;
  split->device_elements_ = device_elements;
  split->tile_elements_ = tile;
  if (device_elements > 0) {
    SLUICE_ASSIGN_OR_RETURN(split->stream_, device.CreateStream());
    SLUICE_ASSIGN_OR_RETURN(
        split->device_part_,
        ShardedAdam::Create(ops, *split->stream_, options.optimizer, options.param_dtype,
                            params.shard, device_elements, params.host));
  }
  if (device_elements < count) {
    SLUICE_ASSIGN_OR_RETURN(
        split->offloaded_part_,
        CreateOffloadedPart(device, options,
                            {.shard = Offset(params.shard, device_elements, options.param_dtype),
                             .host = params.host},
                            /*host_gradients=*/false, count - device_elements, tiers,
                            "sluice_optimizer"));
  }
  return split;
}

SplitOptimizer::~SplitOptimizer() {
  if (stream_ != nullptr) (void)stream_->Synchronize();
}

Status SplitOptimizer::CheckUsable() const {
  if (broken_.ok()) return OkStatus();
  return FailedPreconditionError(
      "the partially offloaded optimizer is unusable since a step failed (its two parts may be "
      "at different steps); restore it from a checkpoint (RestoreState). The failure: {}",
      broken_.ToString());
}

Status SplitOptimizer::LoadMasterFromParams() {
  SLUICE_RETURN_IF_ERROR(CheckUsable());
  if (device_part_ != nullptr) {
    SLUICE_RETURN_IF_ERROR(device_part_->LoadMasterFromParams(*stream_));
  }
  if (offloaded_part_.adam != nullptr) {
    SLUICE_RETURN_IF_ERROR(offloaded_part_.adam->LoadMasterFromParams());
  }
  return stream_ != nullptr ? stream_->Synchronize() : OkStatus();
}

Status SplitOptimizer::Step(const float* grads, double lr, double grad_scale) {
  SLUICE_RETURN_IF_ERROR(CheckUsable());
  if (count_ > 0 && grads == nullptr) {
    return InvalidArgumentError("partially offloaded optimizer step without gradients");
  }
  Status launched;
  if (device_part_ != nullptr) {
    // On its own stream, as device work: it runs while this thread steps the offloaded part.
    // Markers on either side of the op time it where it runs.
    launched = device_->LaunchHostFunc(
        *stream_,
        [this] {
          device_start_ns_ = TraceClockNs();
          return OkStatus();
        },
        "device adam start");
    if (launched.ok()) launched = device_part_->Step(*stream_, grads, lr, grad_scale);
    if (launched.ok()) {
      launched = device_->LaunchHostFunc(
          *stream_,
          [this] {
            const int64_t end = TraceClockNs();
            device_step_s_ = static_cast<double>(end - device_start_ns_) * 1e-9;
            TraceRecorder& trace = TraceRecorder::Global();
            if (trace.enabled())
              trace.Record(kTraceLaneCompute, "device adam", device_start_ns_, end);
            return OkStatus();
          },
          "device adam end");
    }
  }
  Status offloaded;
  if (launched.ok() && offloaded_part_.adam != nullptr) {
    offloaded = offloaded_part_.adam->Step(grads + device_elements_, lr, grad_scale);
  }
  Status device = launched.ok() && stream_ != nullptr ? stream_->Synchronize() : launched;
  Status status = !device.ok() ? std::move(device) : std::move(offloaded);
  if (!status.ok()) {
    broken_ = status;
    return std::move(status).WithContext(fmt::format(
        "partially offloaded optimizer step {} (elements [0, {}) on the device, [{}, {}) "
        "offloaded)",
        step_ + 1, device_elements_, device_elements_, count_));
  }
  ++step_;
  return OkStatus();
}

Status SplitOptimizer::StreamState(int64_t begin, int64_t n,
                                   const offload::OptimizerStateSink& sink) const {
  SLUICE_RETURN_IF_ERROR(offload::CheckStateRange(begin, n, count_));
  const int64_t end = begin + n;
  // The device part in pieces of at most one tile, as the offloaded part hands them out.
  for (int64_t at = begin; at < std::min(end, device_elements_);) {
    const int64_t take =
        std::min({end, device_elements_, (at / tile_elements_ + 1) * tile_elements_}) - at;
    SLUICE_RETURN_IF_ERROR(device_part_->StreamState(*stream_, at, take, take, sink));
    at += take;
  }
  const int64_t off_begin = std::max(begin, device_elements_);
  if (off_begin >= end) return OkStatus();
  const int64_t shift = device_elements_;
  return offloaded_part_.adam->StreamState(
      off_begin - shift, end - off_begin,
      [&sink, shift](int64_t piece, int64_t count, const float* master, const float* exp_avg,
                     const float* exp_avg_sq) {
        return sink(piece + shift, count, master, exp_avg, exp_avg_sq);
      });
}

Status SplitOptimizer::RestoreState(const offload::OptimizerStateSource& source, int64_t step) {
  // No CheckUsable(): replacing the whole state is how a failed step is recovered from.
  if (step < 0) return InvalidArgumentError("restoring the optimizer at step {}", step);
  if (stream_ != nullptr && !stream_->Synchronize().ok()) {
    // A failed step left its error on the stream for good: start a fresh one.
    SLUICE_ASSIGN_OR_RETURN(stream_, device_->CreateStream());
  }
  if (device_part_ != nullptr) {
    SLUICE_RETURN_IF_ERROR(RestoreShardedAdam(*device_part_, *stream_, source, step));
  }
  if (offloaded_part_.adam != nullptr) {
    const int64_t shift = device_elements_;
    Status restored = offloaded_part_.adam->RestoreState(
        [&source, shift](int64_t begin, int64_t n, float* master, float* exp_avg,
                         float* exp_avg_sq) {
          return source(begin + shift, n, master, exp_avg, exp_avg_sq);
        },
        step);
    if (!restored.ok()) {
      // The device part may already hold the new state: no step may mix the two.
      broken_ = restored;
      return restored;
    }
  }
  step_ = step;
  broken_ = OkStatus();
  return OkStatus();
}

uint64_t SplitOptimizer::state_bytes() const {
  return device_part_ != nullptr ? device_part_->state_bytes() : 0;
}

uint64_t SplitOptimizer::host_bytes() const {
  return offloaded_part_.adam != nullptr ? offloaded_part_.adam->host_bytes() : 0;
}

uint64_t SplitOptimizer::pinned_bytes() const {
  return offloaded_part_.adam != nullptr ? offloaded_part_.adam->pinned_bytes() : 0;
}

uint64_t SplitOptimizer::nvme_bytes() const {
  return offloaded_part_.adam != nullptr ? offloaded_part_.adam->nvme_bytes() : 0;
}

const offload::OffloadStepTimings* SplitOptimizer::last_step_timings() const {
  return offloaded_part_.adam != nullptr ? &offloaded_part_.adam->last_step_timings() : nullptr;
}

Result<std::unique_ptr<ZeroOptimizer>> CreateSplitOptimizer(ops::OpsBackend& ops,
                                                            const ZeroOptions& options,
                                                            const ParamShardTarget& params,
                                                            int64_t count,
                                                            offload::RankTiers& tiers) {
  SLUICE_ASSIGN_OR_RETURN(const int64_t tile, CheckedOffloadTileElements(options.sub_group_size));
  std::optional<OffloadRatioChoice> choice;
  int64_t device_elements = 0;
  if (options.offload_optimizer.ratio_auto) {
    SLUICE_ASSIGN_OR_RETURN(choice, ResolveAutoOffloadRatio(ops, options, count, tiers));
    device_elements = choice->device_elements;
  } else {
    device_elements = DeviceElementsForRatio(count, tile, options.offload_optimizer.ratio);
  }
  SLUICE_ASSIGN_OR_RETURN(
      std::unique_ptr<SplitOptimizer> split,
      SplitOptimizer::Create(ops, options, params, count, device_elements, tiers));
  if (choice.has_value()) split->set_auto_choice(*std::move(choice));
  SLUICE_LOG(kDebug, "offload",
             "partial optimizer offload{}: elements [0, {}) of {} on the device, the rest on {} "
             "(ratio {:.4f}, tiles of {})",
             options.offload_optimizer.ratio_auto ? " (auto)" : "", device_elements, count,
             OffloadDeviceName(options.offload_optimizer.device), split->offload_ratio(), tile);
  return std::unique_ptr<ZeroOptimizer>(std::move(split));
}

}  // namespace sluice::zero
