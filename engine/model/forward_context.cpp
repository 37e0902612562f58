#include "engine/model/forward_context.h"

#include "runtime/check.h"

namespace sluice::model {

template <typename T>
ForwardContext<T>::ForwardContext(BufferAllocator& allocator, const ParameterBinding<T>& params,
                                  int64_t batch, int64_t seq, const int32_t* tokens,
                                  int num_threads)
    : allocator_(&allocator),
      params_(&params),
      batch_(batch),
      seq_(seq),
      tokens_(tokens),
      num_threads_(num_threads),
      meter_(std::make_shared<ActivationMeter>()) {}

template <typename T>
ForwardContext<T>::~ForwardContext() {
  if (meter_ == nullptr) return;  // moved from
  for (auto& [id, slot] : saved_) {
    for (Buffer& buffer : slot.owned) meter_->Remove(static_cast<int64_t>(buffer.size()));
  }
  for (auto& [id, buffers] : grads_) {
    for (Buffer& buffer : buffers) meter_->Remove(static_cast<int64_t>(buffer.size()));
  }
}

template <typename T>
ForwardContext<T> ForwardContext<T>::Child() const {
  ForwardContext child(*allocator_, *params_, batch_, seq_, tokens_, num_threads_);
  child.meter_ = meter_;
  return child;
}

template <typename T>
Result<T*> ForwardContext<T>::AllocateSaved(int module_id, int64_t count) {
  SLUICE_CHECK_GE(count, 0);
  const size_t bytes = static_cast<size_t>(count) * sizeof(T);
  SLUICE_ASSIGN_OR_RETURN(Buffer buffer, allocator_->Allocate(bytes, MemoryCategory::kActivations));
  meter_->Add(static_cast<int64_t>(bytes));
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
  for (Buffer& buffer : it->second.owned) meter_->Remove(static_cast<int64_t>(buffer.size()));
  saved_.erase(it);
}

template <typename T>
Result<T*> ForwardContext<T>::AllocateGrad(int module_id, int64_t count) {
  SLUICE_CHECK_GE(count, 0);
  const size_t bytes = static_cast<size_t>(count) * sizeof(T);
  SLUICE_ASSIGN_OR_RETURN(Buffer buffer, allocator_->Allocate(bytes, MemoryCategory::kActivations));
  meter_->Add(static_cast<int64_t>(bytes));
  T* data = buffer.data_as<T>();
  grads_[module_id].push_back(std::move(buffer));
  return data;
}

template <typename T>
void ForwardContext<T>::ReleaseGrads(int module_id) {
  const auto it = grads_.find(module_id);
  if (it == grads_.end()) return;
  for (Buffer& buffer : it->second) meter_->Remove(static_cast<int64_t>(buffer.size()));
  grads_.erase(it);
}

template <typename T>
Result<Scratch<T>> ForwardContext<T>::AllocateScratch(int64_t count) {
  SLUICE_CHECK_GE(count, 0);
  const size_t bytes = static_cast<size_t>(count) * sizeof(T);
  SLUICE_ASSIGN_OR_RETURN(Buffer buffer, allocator_->Allocate(bytes, MemoryCategory::kBuffers));
  meter_->Add(static_cast<int64_t>(bytes));
  return Scratch<T>(std::move(buffer), meter_);
}

template class ForwardContext<float>;
template class ForwardContext<double>;

}  // namespace sluice::model
