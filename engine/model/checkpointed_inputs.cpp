#include "engine/model/checkpointed_inputs.h"

#include <algorithm>
#include <utility>

#include "runtime/check.h"
#include "runtime/logging.h"
#include "runtime/trace.h"

namespace sluice::model {

template <typename T>
CheckpointedInputs<T>::CheckpointedInputs(ModuleBuilder& builder, const ModelOptions& options)
    : CheckpointedInputs(builder, options, WholeModelStage(options)) {}

template <typename T>
CheckpointedInputs<T>::CheckpointedInputs(ModuleBuilder& builder, const ModelOptions& options,
                                          const ModelStage& stage)
    : options_(options.checkpointing),
      first_(stage.begin_layer),
      count_(std::max<int64_t>(
          0, std::min(CheckpointedBlocks(options), stage.end_layer) - stage.begin_layer)),
      d_model_(options.d_model),
      buffer_id_(builder.NextModuleId()) {
  start_ns_.assign(static_cast<size_t>(count_), 0);
}

template <typename T>
typename CheckpointedInputs<T>::MicroBatch& CheckpointedInputs<T>::Begin(
    const ForwardContext<T>& ctx) {
  // A micro-batch id seen before (an earlier pass's, or one a failed pass left) starts afresh:
  // nothing of it is handed off; its pinned slots are reused.
  MicroBatch& micro = micro_batches_[ctx.micro_batch()];
  micro.pending_id = -1;
  micro.pending = nullptr;
  if (options_.host && micro.host.empty()) {
    if (!spare_host_.empty()) {
      micro.host = std::move(spare_host_.back());
      spare_host_.pop_back();
    } else {
      micro.host.resize(options_.contiguous ? 1 : static_cast<size_t>(count_));
    }
  }
  return micro;
}

template <typename T>
typename CheckpointedInputs<T>::MicroBatch& CheckpointedInputs<T>::Of(
    const ForwardContext<T>& ctx) {
  const auto it = micro_batches_.find(ctx.micro_batch());
  SLUICE_CHECK(it != micro_batches_.end())
      << "micro-batch " << ctx.micro_batch() << " has no checkpointed block in flight";
  return it->second;
}

template <typename T>
Result<T*> CheckpointedInputs<T>::HostSlot(MicroBatch& micro, Stream& stream, int64_t slot,
                                           int64_t count) {
  const int64_t index = slot - first_;
  PinnedBuffer& buffer = micro.host[options_.contiguous ? 0 : static_cast<size_t>(index)];
  const int64_t elements = options_.contiguous ? count * count_ : count;
  const size_t bytes = static_cast<size_t>(elements) * sizeof(T);
  if (buffer.size() < bytes) {
    // The slots may have come from a micro-batch of this pass whose last copy back to the
    // device is still queued on the stream: let it run before the memory goes (rare: a pass
    // with more tokens than any before).
    if (!buffer.empty()) SLUICE_RETURN_IF_ERROR(stream.Synchronize());
    buffer.Reset();
    SLUICE_ASSIGN_OR_RETURN(
        buffer, stream.device().AllocatePinnedHost(bytes, MemoryCategory::kActivations));
  }
  return buffer.template data_as<T>() + (options_.contiguous ? index * count : 0);
}

template <typename T>
Status CheckpointedInputs<T>::Keep(ForwardContext<T>& ctx, int block_id, int64_t slot, Act<T> x) {
  SLUICE_CHECK(holds(slot)) << "checkpoint slot " << slot << " of [" << first_ << ", "
                            << first_ + count_ << ")";
  MicroBatch& micro = slot == first_ ? Begin(ctx) : Of(ctx);
  const int64_t n = x.numel();
  const size_t bytes = static_cast<size_t>(n) * sizeof(T);
  if (!copies()) {
    ctx.KeepSaved(block_id, x.data);
    return OkStatus();
  }
  if (options_.host) {
    SLUICE_ASSIGN_OR_RETURN(T * dst, HostSlot(micro, ctx.stream(), slot, n));
    return ctx.device().CopyAsync(dst, x.data, bytes, CopyKind::kD2H, ctx.stream());
  }
  if (slot == first_) {
    ctx.ReleaseSaved(buffer_id_);
    SLUICE_RETURN_IF_ERROR(ctx.AllocateSaved(buffer_id_, n * count_).status());
  }
  const auto saved = ctx.Saved(buffer_id_);
  SLUICE_CHECK(!saved.empty()) << "the contiguous checkpoint buffer was not allocated";
  return ctx.Copy(x, saved[0] + (slot - first_) * n);
}

template <typename T>
void CheckpointedInputs<T>::HandOff(ForwardContext<T>& ctx, const T* x, int block_id, const T* y) {
  if (!copies()) return;  // the inputs are views: their producers keep them
  MicroBatch& micro = Of(ctx);
  if (micro.pending != nullptr && micro.pending == x) ctx.ReleaseSaved(micro.pending_id);
  micro.pending_id = block_id;
  micro.pending = y;
}

template <typename T>
Result<T*> CheckpointedInputs<T>::Restore(ForwardContext<T>& ctx, ForwardContext<T>& work,
                                          int block_id, int64_t slot, int64_t rows) {
  SLUICE_CHECK(holds(slot)) << "checkpoint slot " << slot << " of [" << first_ << ", "
                            << first_ + count_ << ")";
  if (!copies()) {
    const auto saved = ctx.Saved(block_id);
    SLUICE_CHECK(!saved.empty()) << "block " << block_id << " kept no input";
    return saved[0];
  }
  const int64_t n = rows * d_model_;
  const int64_t index = slot - first_;
  if (!options_.host) {
    const auto saved = ctx.Saved(buffer_id_);
    SLUICE_CHECK(!saved.empty()) << "the contiguous checkpoint buffer is gone";
    return saved[0] + index * n;
  }
  // The pinned slot was filled by this micro-batch's forward on this stream, and is read here on
  // it.
  MicroBatch& micro = Of(ctx);
  const size_t bytes = static_cast<size_t>(n) * sizeof(T);
  T* src = micro.host[options_.contiguous ? 0 : static_cast<size_t>(index)].template data_as<T>() +
           (options_.contiguous ? index * n : 0);
  SLUICE_ASSIGN_OR_RETURN(T * x, work.AllocateSaved(block_id, n));
  SLUICE_RETURN_IF_ERROR(ctx.device().CopyAsync(x, src, bytes, CopyKind::kH2D, ctx.stream()));
  return x;
}

template <typename T>
void CheckpointedInputs<T>::DropMicroBatches() {
  for (auto& [id, micro] : micro_batches_) {
    if (!micro.host.empty()) spare_host_.push_back(std::move(micro.host));
  }
  micro_batches_.clear();
}

template <typename T>
Status CheckpointedInputs<T>::Done(ForwardContext<T>& ctx, int64_t slot) {
  if (slot != first_) return OkStatus();
  if (options_.contiguous && !options_.host) ctx.ReleaseSaved(buffer_id_);
  // The copies back to the device queued so far are ordered before any later use of these slots
  // on this stream.
  if (const auto it = micro_batches_.find(ctx.micro_batch()); it != micro_batches_.end()) {
    if (!it->second.host.empty()) spare_host_.push_back(std::move(it->second.host));
    micro_batches_.erase(it);
  }
  if (!options_.profile) return OkStatus();
  return ctx.device().LaunchHostFunc(
      ctx.stream(),
      [this] {
        SLUICE_LOG(kInfo, "model",
                   "activation_checkpointing.profile: recomputed {} checkpointed blocks in {:.3f} "
                   "ms in this backward",
                   pass_blocks_, static_cast<double>(pass_ns_) / 1e6);
        pass_blocks_ = 0;
        pass_ns_ = 0;
        return OkStatus();
      },
      "activation checkpointing profile");
}

template <typename T>
Status CheckpointedInputs<T>::BeginRecompute(Stream& stream, int64_t slot) {
  int64_t* start = &start_ns_[static_cast<size_t>(slot - first_)];
  return stream.device().LaunchHostFunc(
      stream,
      [start] {
        *start = TraceClockNs();
        return OkStatus();
      },
      "recompute start");
}

template <typename T>
Status CheckpointedInputs<T>::EndRecompute(Stream& stream, int64_t slot, const std::string& name) {
  const int64_t* start = &start_ns_[static_cast<size_t>(slot - first_)];
  return stream.device().LaunchHostFunc(
      stream,
      [this, start, name] {
        const int64_t end = TraceClockNs();
        const int64_t elapsed = end - *start;
        pass_ns_ += elapsed;
        ++pass_blocks_;
        recompute_ns_.fetch_add(elapsed);
        recomputed_blocks_.fetch_add(1);
        TraceRecorder& trace = TraceRecorder::Global();
        if (trace.enabled()) trace.Record(kTraceLaneCompute, "recompute " + name, *start, end);
        return OkStatus();
      },
      "recompute end");
}

template class CheckpointedInputs<float>;
template class CheckpointedInputs<double>;

}  // namespace sluice::model
