#include "engine/model/forward_context.h"

#include <cstdint>
#include <utility>

#include "engine/model/deferred_weight_grads.h"
#include "runtime/check.h"

namespace sluice::model {

template <typename T>
ForwardContext<T>::ForwardContext(ops::OpsBackend& ops, Stream& stream,
                                  const ParameterBinding<T>& params, int64_t batch, int64_t seq,
                                  const int32_t* tokens, int micro_batch,
                                  std::shared_ptr<ActivationMeter> meter)
    : ops_(&ops),
      stream_(&stream),
      params_(&params),
      batch_(batch),
      seq_(seq),
      tokens_(tokens),
      micro_batch_(micro_batch),
      meter_(meter != nullptr ? std::move(meter) : std::make_shared<ActivationMeter>()) {}

template <typename T>
ForwardContext<T>::~ForwardContext() {
  if (meter_ == nullptr) return;  // moved from
  for (auto& [id, slot] : saved_) Drop(slot.owned);
  for (auto& [id, buffers] : grads_) Drop(buffers);
}

template <typename T>
ForwardContext<T> ForwardContext<T>::Child() const {
  ForwardContext child(*ops_, *stream_, *params_, batch_, seq_, tokens_, micro_batch_, meter_);
  child.deferred_ = deferred_;
  return child;
}

template <typename T>
Tensor ForwardContext<T>::View(const T* data, Shape shape) const {
  if (data == nullptr) return Tensor();
  return Tensor(const_cast<T*>(data), kCompute, std::move(shape), MemoryTier::kDevice,
                ops_->device().index());
}

template <typename T>
Status ForwardContext<T>::Copy(Act<T> src, T* dst) const {
  return ops_->device().CopyAsync(dst, src.data, static_cast<size_t>(src.numel()) * sizeof(T),
                                  CopyKind::kD2D, *stream_);
}

template <typename T>
Status ForwardContext<T>::CopyColumns(const T* src, int64_t src_cols, T* dst, int64_t dst_cols,
                                      int64_t rows, int64_t width) const {
  constexpr size_t kSize = sizeof(T);
  return ops_->device().Copy2DAsync(
      dst, static_cast<size_t>(dst_cols) * kSize, src, static_cast<size_t>(src_cols) * kSize,
      static_cast<size_t>(width) * kSize, static_cast<size_t>(rows), CopyKind::kD2D, *stream_);
}

template <typename T>
Result<DeviceBuffer> ForwardContext<T>::Allocate(int64_t count, MemoryCategory category) {
  SLUICE_CHECK_GE(count, 0);
  const size_t bytes = static_cast<size_t>(count) * sizeof(T);
  SLUICE_ASSIGN_OR_RETURN(DeviceBuffer buffer,
                          ops_->device().AllocateAsync(bytes, category, *stream_));
  meter_->Add(static_cast<int64_t>(bytes));
  return buffer;
}

template <typename T>
void ForwardContext<T>::Drop(std::vector<DeviceBuffer>& buffers) {
  for (DeviceBuffer& buffer : buffers) {
    if (deferred_ != nullptr && deferred_->Pinned(buffer)) {
      deferred_->Keep(std::move(buffer));  // still on the meter, until the weight gradients ran
      continue;
    }
    meter_->Remove(static_cast<int64_t>(buffer.size()));
  }
  buffers.clear();  // each is freed on the stream, after the ops queued so far
}

template <typename T>
bool ForwardContext<T>::OwnsSaved(const T* p) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  for (const auto& [id, slot] : saved_) {
    for (const DeviceBuffer& buffer : slot.owned) {
      const auto begin = reinterpret_cast<uintptr_t>(buffer.data());
      if (at >= begin && at < begin + buffer.size()) return true;
    }
  }
  return false;
}

template <typename T>
void ForwardContext<T>::DeferWeightGradsTo(std::shared_ptr<DeferredWeightGrads<T>> store) {
  deferred_ = std::move(store);
}

template <typename T>
Status ForwardContext<T>::DeferWeightGrad(
    const T* x, int64_t in, Act<T> dy, int param,
    std::function<Status(ForwardContext&, const T* x, const T* dy)> task) {
  SLUICE_CHECK(deferred_ != nullptr) << "DeferWeightGrad outside a split backward";
  DeviceBuffer x_copy;
  if (OwnsSaved(x)) {
    deferred_->Pin(x);
  } else {
    // Memory this context does not own may be freed or rewritten before the weight gradient.
    SLUICE_ASSIGN_OR_RETURN(x_copy, Allocate(dy.rows * in, MemoryCategory::kActivations));
    SLUICE_RETURN_IF_ERROR(Copy(Act<T>{const_cast<T*>(x), dy.rows, in}, x_copy.data_as<T>()));
  }
  SLUICE_ASSIGN_OR_RETURN(DeviceBuffer dy_copy, Allocate(dy.numel(), MemoryCategory::kActivations));
  SLUICE_RETURN_IF_ERROR(Copy(dy, dy_copy.data_as<T>()));
  const T* kept = x_copy.empty() ? x : x_copy.data_as<T>();
  deferred_->Add(kept, std::move(x_copy), std::move(dy_copy), param, std::move(task));
  return OkStatus();
}

template <typename T>
void ForwardContext<T>::ReleaseAll() {
  for (auto& [id, slot] : saved_) Drop(slot.owned);
  saved_.clear();
  for (auto& [id, buffers] : grads_) Drop(buffers);
  grads_.clear();
}

template <typename T>
Result<T*> ForwardContext<T>::AllocateSaved(int module_id, int64_t count) {
  SLUICE_ASSIGN_OR_RETURN(DeviceBuffer buffer, Allocate(count, MemoryCategory::kActivations));
  T* data = buffer.data_as<T>();
  Slot& slot = saved_[module_id];
  slot.owned.push_back(std::move(buffer));
  slot.views.push_back(data);
  return data;
}

template <typename T>
void ForwardContext<T>::KeepSaved(int module_id, T* view) {
  saved_[module_id].views.push_back(view);
}

template <typename T>
std::span<T* const> ForwardContext<T>::Saved(int module_id) const {
  const auto it = saved_.find(module_id);
  if (it == saved_.end()) return {};
  return it->second.views;
}

template <typename T>
void ForwardContext<T>::ReleaseSaved(int module_id) {
  const auto it = saved_.find(module_id);
  if (it == saved_.end()) return;
  Drop(it->second.owned);
  saved_.erase(it);
}

template <typename T>
void ForwardContext<T>::RebaseSaved(std::span<const int> ids, const T* from, int64_t count, T* to) {
  // As integers: `from` no longer points at an object.
  const auto begin = reinterpret_cast<uintptr_t>(from);
  const auto end = begin + static_cast<uintptr_t>(count) * sizeof(T);
  for (const int id : ids) {
    const auto it = saved_.find(id);
    if (it == saved_.end()) continue;
    for (T*& view : it->second.views) {
      const auto at = reinterpret_cast<uintptr_t>(view);
      if (at >= begin && at < end) view = to + (at - begin) / sizeof(T);
    }
  }
}

template <typename T>
Result<T*> ForwardContext<T>::AllocateGrad(int module_id, int64_t count) {
  SLUICE_ASSIGN_OR_RETURN(DeviceBuffer buffer, Allocate(count, MemoryCategory::kActivations));
  T* data = buffer.data_as<T>();
  grads_[module_id].push_back(std::move(buffer));
  return data;
}

template <typename T>
void ForwardContext<T>::ReleaseGrads(int module_id) {
  const auto it = grads_.find(module_id);
  if (it == grads_.end()) return;
  Drop(it->second);
  grads_.erase(it);
}

template <typename T>
Result<Scratch<T>> ForwardContext<T>::AllocateScratch(int64_t count) {
  SLUICE_ASSIGN_OR_RETURN(DeviceBuffer buffer, Allocate(count, MemoryCategory::kBuffers));
  return Scratch<T>(std::move(buffer), meter_);
}

template class ForwardContext<float>;
template class ForwardContext<double>;

}  // namespace sluice::model
