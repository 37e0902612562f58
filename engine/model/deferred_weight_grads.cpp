#include "engine/model/deferred_weight_grads.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace sluice::model {

template <typename T>
DeferredWeightGrads<T>::~DeferredWeightGrads() {
  for (Pending& pending : tasks_) {
    Free(pending.x_copy);
    Free(pending.dy);
  }
  for (DeviceBuffer& buffer : kept_) Free(buffer);
}

template <typename T>
void DeferredWeightGrads<T>::Free(DeviceBuffer& buffer) {
  meter_->Remove(static_cast<int64_t>(buffer.size()));
  buffer.Reset();  // on the stream it was allocated on, after the work queued so far
}

template <typename T>
void DeferredWeightGrads<T>::Add(const T* x, DeviceBuffer x_copy, DeviceBuffer dy, int param,
                                 Task task) {
  tasks_.push_back(Pending{.unit = unit_,
                           .param = param,
                           .x = x,
                           .x_copy = std::move(x_copy),
                           .dy = std::move(dy),
                           .task = std::move(task)});
}

template <typename T>
bool DeferredWeightGrads<T>::Pinned(const DeviceBuffer& buffer) const {
  if (pinned_.empty() || buffer.size() == 0) return false;
  const T* begin = buffer.data_as<T>();
  const auto it = pinned_.lower_bound(begin);
  // Addresses as integers: the pinned pointers may lie in any other allocation.
  return it != pinned_.end() &&
         reinterpret_cast<uintptr_t>(*it) < reinterpret_cast<uintptr_t>(begin) + buffer.size();
}

template <typename T>
std::vector<int> DeferredWeightGrads<T>::Units() const {
  std::vector<int> units;
  for (const Pending& pending : tasks_) {
    if (std::find(units.begin(), units.end(), pending.unit) == units.end()) {
      units.push_back(pending.unit);
    }
  }
  return units;
}

template <typename T>
std::vector<int> DeferredWeightGrads<T>::ParamsOf(int unit) const {
  std::vector<int> params;
  for (const Pending& pending : tasks_) {
    if (pending.unit == unit) params.push_back(pending.param);
  }
  return params;
}

template <typename T>
Status DeferredWeightGrads<T>::RunUnit(int unit, ForwardContext<T>& ctx) const {
  for (const Pending& pending : tasks_) {
    if (pending.unit != unit) continue;
    SLUICE_RETURN_IF_ERROR(pending.task(ctx, pending.x, pending.dy.template data_as<T>()));
  }
  return OkStatus();
}

template class DeferredWeightGrads<float>;
template class DeferredWeightGrads<double>;

}  // namespace sluice::model
