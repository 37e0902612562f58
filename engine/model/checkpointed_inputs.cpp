#include "engine/model/checkpointed_inputs.h"

#include "runtime/check.h"
#include "runtime/logging.h"
#include "runtime/trace.h"

namespace sluice::model {

template <typename T>
CheckpointedInputs<T>::CheckpointedInputs(ModuleBuilder& builder, const ModelOptions& options)
    : options_(options.checkpointing),
      count_(CheckpointedBlocks(options)),
      d_model_(options.d_model),
      buffer_id_(builder.NextModuleId()) {
  if (options_.host) host_.resize(options_.contiguous ? 1 : static_cast<size_t>(count_));
  start_ns_.assign(static_cast<size_t>(count_), 0);
}

template <typename T>
Result<T*> CheckpointedInputs<T>::HostSlot(Device& device, int64_t slot, int64_t count) {
  PinnedBuffer& buffer = host_[options_.contiguous ? 0 : static_cast<size_t>(slot)];
  const int64_t elements = options_.contiguous ? count * count_ : count;
  const size_t bytes = static_cast<size_t>(elements) * sizeof(T);
  if (buffer.size() < bytes) {
    // Every earlier pass has finished (Model synchronizes at the end of each), and this pass has
    // not used the slot yet: nothing enqueued still reads or writes the old buffer.
    buffer.Reset();
    SLUICE_ASSIGN_OR_RETURN(buffer, device.AllocatePinnedHost(bytes, MemoryCategory::kActivations));
  }
  return buffer.template data_as<T>() + (options_.contiguous ? slot * count : 0);
}

template <typename T>
Status CheckpointedInputs<T>::Keep(ForwardContext<T>& ctx, int block_id, int64_t slot, Act<T> x) {
  SLUICE_CHECK(slot >= 0 && slot < count_) << "checkpoint slot " << slot << " of " << count_;
  if (slot == 0) {  // a new pass: nothing of the last one is handed off
    pending_id_ = -1;
    pending_ = nullptr;
  }
  const int64_t n = x.numel();
  const size_t bytes = static_cast<size_t>(n) * sizeof(T);
  if (!copies()) {
    ctx.KeepSaved(block_id, x.data);
    return OkStatus();
  }
  if (options_.host) {
    SLUICE_ASSIGN_OR_RETURN(T * dst, HostSlot(ctx.device(), slot, n));
    return ctx.device().CopyAsync(dst, x.data, bytes, CopyKind::kD2H, ctx.stream());
  }
  if (slot == 0) {
    ctx.ReleaseSaved(buffer_id_);
    SLUICE_RETURN_IF_ERROR(ctx.AllocateSaved(buffer_id_, n * count_).status());
  }
  const auto saved = ctx.Saved(buffer_id_);
  SLUICE_CHECK(!saved.empty()) << "the contiguous checkpoint buffer was not allocated";
  return ctx.Copy(x, saved[0] + slot * n);
}

template <typename T>
void CheckpointedInputs<T>::HandOff(ForwardContext<T>& ctx, const T* x, int block_id, const T* y) {
  if (!copies()) return;  // the inputs are views: their producers keep them
  if (pending_ != nullptr && pending_ == x) ctx.ReleaseSaved(pending_id_);
  pending_id_ = block_id;
  pending_ = y;
}

template <typename T>
Result<T*> CheckpointedInputs<T>::Restore(ForwardContext<T>& ctx, ForwardContext<T>& work,
                                          int block_id, int64_t slot, int64_t rows) {
  SLUICE_CHECK(slot >= 0 && slot < count_) << "checkpoint slot " << slot << " of " << count_;
  if (!copies()) {
    const auto saved = ctx.Saved(block_id);
    SLUICE_CHECK(!saved.empty()) << "block " << block_id << " kept no input";
    return saved[0];
  }
  const int64_t n = rows * d_model_;
  if (!options_.host) {
    const auto saved = ctx.Saved(buffer_id_);
    SLUICE_CHECK(!saved.empty()) << "the contiguous checkpoint buffer is gone";
    return saved[0] + slot * n;
  }
  // The pinned slot was filled by this pass's forward on this stream, and is read here on it.
  const size_t bytes = static_cast<size_t>(n) * sizeof(T);
  T* src = host_[options_.contiguous ? 0 : static_cast<size_t>(slot)].template data_as<T>() +
           (options_.contiguous ? slot * n : 0);
  SLUICE_ASSIGN_OR_RETURN(T * x, work.AllocateSaved(block_id, n));
  SLUICE_RETURN_IF_ERROR(ctx.device().CopyAsync(x, src, bytes, CopyKind::kH2D, ctx.stream()));
  return x;
}

template <typename T>
Status CheckpointedInputs<T>::Done(ForwardContext<T>& ctx, int64_t slot) {
  if (slot != 0) return OkStatus();
  if (options_.contiguous && !options_.host) ctx.ReleaseSaved(buffer_id_);
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
  int64_t* start = &start_ns_[static_cast<size_t>(slot)];
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
  const int64_t* start = &start_ns_[static_cast<size_t>(slot)];
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
