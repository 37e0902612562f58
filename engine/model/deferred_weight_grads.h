// The weight gradients one micro-batch's split backward left for later (zero-bubble B/W,
// parallelism-study.md §5.9; ZB's WeightGradStore): Model::BackwardInput runs every module's
// backward but, for each Linear, only dx = dy·W (and the cheap bias, norm and embedding
// gradients); the GEMM dW += dyᵀ·x is queued here as a task, and Model::BackwardWeight runs the
// micro-batch's tasks, in the order BackwardInput queued them, then frees what they kept.
//
// What W keeps alive, per deferred Linear of the micro-batch, from its B to its W:
// - x, its forward input [rows, in]. Not copied when it lies in a buffer a context of the
//   micro-batch saved (a norm's output, the attention's output, the MLP activation: every Linear
//   input the model has): that buffer is pinned, and when its owner releases it in the backward
//   it moves here instead of being freed. Linears reading the same input (q, k, v; gate and up)
//   share it. Anywhere else (memory a context does not own) x is copied at B.
// - a copy of dy [rows, out]: the gradient buffers are scratch of the modules above, overwritten
//   or freed as soon as their backward returns.
// That is ZB-H1's memory: a stage holds 1F1B's in-flight activations (at most P micro-batches
// between F and B) plus these inputs and output gradients of the linears for the micro-batches
// between B and W (at most r + 1 on stage r). The bytes stay on the pass's ActivationMeter until
// W frees them, so Model::last_peak_activation_bytes counts them.
//
// One object per micro-batch of a split backward, shared by its ForwardContext and the contexts
// derived from it (a checkpointed block's recomputation). A fused backward (Model::Backward)
// creates none: nothing of it changes or is held longer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "engine/model/forward_context.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::model {

template <typename T>
class DeferredWeightGrads {
 public:
  // dW += dyᵀ·x for one Linear, enqueued on ctx's stream; x and dy are what was kept.
  using Task = std::function<Status(ForwardContext<T>& ctx, const T* x, const T* dy)>;

  explicit DeferredWeightGrads(std::shared_ptr<ActivationMeter> meter) : meter_(std::move(meter)) {}
  // Frees what the tasks kept, on the stream, after the work queued so far.
  ~DeferredWeightGrads();
  DeferredWeightGrads(const DeferredWeightGrads&) = delete;
  DeferredWeightGrads& operator=(const DeferredWeightGrads&) = delete;

  // The unit whose backward queues the next tasks (for the hooks around each unit's W).
  void BeginUnit(int unit) { unit_ = unit; }

  // Queues a task for registry parameter `param` (the weight whose gradient it accumulates).
  // `x` lies in a pinned buffer (Pin) or in `x_copy`; `dy` is the copy of the output gradient,
  // owned here from now on.
  void Add(const T* x, DeviceBuffer x_copy, DeviceBuffer dy, int param, Task task);
  // Keeps the buffer that holds `x` alive until the tasks ran: its owner hands it over (Keep)
  // when it releases it.
  void Pin(const T* x) { pinned_.insert(x); }
  // Whether `buffer` holds a pinned input.
  bool Pinned(const DeviceBuffer& buffer) const;
  // Takes a pinned buffer its context released; its bytes stay on the meter.
  void Keep(DeviceBuffer buffer) { kept_.push_back(std::move(buffer)); }

  int pending() const { return static_cast<int>(tasks_.size()); }
  // The units that queued tasks, in queue order, each once.
  std::vector<int> Units() const;
  // The parameters `unit`'s tasks accumulate into, in queue order.
  std::vector<int> ParamsOf(int unit) const;
  // Enqueues the tasks `unit` queued, in order.
  Status RunUnit(int unit, ForwardContext<T>& ctx) const;

 private:
  struct Pending {
    int unit = -1;
    int param = -1;
    const T* x = nullptr;
    DeviceBuffer x_copy;  // empty when x is pinned
    DeviceBuffer dy;
    Task task;
  };

  void Free(DeviceBuffer& buffer);

  std::shared_ptr<ActivationMeter> meter_;
  int unit_ = -1;
  std::vector<Pending> tasks_;
  std::set<const T*> pinned_;
  std::vector<DeviceBuffer> kept_;
};

extern template class DeferredWeightGrads<float>;
extern template class DeferredWeightGrads<double>;

}  // namespace sluice::model
