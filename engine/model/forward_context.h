// The state of one forward/backward pass: the ops backend and the stream every op of the pass is
// enqueued on, batch geometry, token ids, where parameters and their gradients are
// (ParameterBinding), and the activations each module saved for its backward.
//
// Execution. Modules never touch activation memory from the host: each op is a launcher on
// ctx.stream() taking Tensor views (ctx.View), and returns once it is enqueued, as a CUDA launch
// does. The host learns results only through a device-to-host copy and a synchronization, which
// the model does at the step boundary (model.h).
//
// Lifetimes, by module id (Module::id()). Every buffer is stream-ordered device memory
// (Device::AllocateAsync on ctx.stream()), so releasing it while ops that use it are still queued
// is safe: the free runs on the stream after them, as cudaFreeAsync.
// - saved: buffers and views a module keeps from its Forward for its Backward, held until the
//   module calls ReleaseSaved(id) at the end of its Backward (or the context is destroyed). A
//   module's output is allocated as saved, so it stays alive while its consumer still needs it:
//   the consumer's backward runs before the producer's.
// - grads: the input gradient a Backward returns, held until its consumer (the caller of
//   Backward) has used it and calls ReleaseGrads(id).
// - scratch: RAII buffers for the duration of one call (the gradients of q, k and v).
// Activation checkpointing runs a block's inner forward in a Child() context that is destroyed
// after the forward and rebuilt in the backward (decoder_block.h).
//
// Split backward (zero-bubble B/W, deferred_weight_grads.h). A context given a store with
// DeferWeightGradsTo runs a backward-input: a Linear leaves its weight gradient there
// (DeferWeightGrad) instead of computing it, and a saved buffer holding a deferred Linear's input
// moves into the store when released, instead of being freed. Without a store (the fused
// backward) none of this runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace sluice::model {

template <typename T>
class DeferredWeightGrads;

// An activation or its gradient: a dense row-major [rows, cols] array of T in device memory, not
// owned. rows = batch * seq (token-major); cols the feature width.
template <typename T>
struct Act {
  T* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  int64_t numel() const { return rows * cols; }
  bool empty() const { return data == nullptr; }
};

// Where a module finds the compute copy of its parameters and the gradients to accumulate into,
// by registry index, in the memory of the pass's device. The model binds its flat buffers (widening
// bf16 storage to fp32 scratch per unit); ZeRO binds gathered full parameters and full-size
// gradient buckets.
template <typename T>
class ParameterBinding {
 public:
  virtual ~ParameterBinding() = default;
  virtual const T* Value(int param) const = 0;
  // Gradients accumulate (+=). Null: this parameter's gradient is not wanted.
  virtual T* Grad(int param) const = 0;
};

// Bytes a context and its children hold (saved, grads, scratch), now and at the peak.
struct ActivationMeter {
  int64_t current = 0;
  int64_t peak = 0;
  void Add(int64_t bytes) {
    current += bytes;
    if (current > peak) peak = current;
  }
  void Remove(int64_t bytes) { current -= bytes; }
};

// A typed scratch buffer owned by the caller's scope, freed on the stream it was allocated on.
template <typename T>
class Scratch {
 public:
  Scratch() = default;
  Scratch(DeviceBuffer buffer, std::shared_ptr<ActivationMeter> meter)
      : buffer_(std::move(buffer)), meter_(std::move(meter)) {}
  Scratch(Scratch&&) noexcept = default;
  Scratch& operator=(Scratch&& other) noexcept {
    Release();
    buffer_ = std::move(other.buffer_);
    meter_ = std::move(other.meter_);
    return *this;
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { Release(); }

  T* get() const { return buffer_.data_as<T>(); }
  void Release() {
    if (meter_ != nullptr) meter_->Remove(static_cast<int64_t>(buffer_.size()));
    buffer_.Reset();
    meter_.reset();
  }

 private:
  DeviceBuffer buffer_;
  std::shared_ptr<ActivationMeter> meter_;
};

// The DType of T: f32 for the CPU and CUDA backends, f64 for the reference.
template <typename T>
constexpr DType ComputeDType() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  return std::is_same_v<T, float> ? DType::kF32 : DType::kF64;
}

template <typename T>
class ForwardContext {
 public:
  static constexpr DType kCompute = ComputeDType<T>();

  // `tokens` ([batch, seq] int32 in device memory), `ops`, `stream` and `params` must outlive the
  // context; every op of the pass is enqueued on `stream`. `micro_batch` names the micro-batch
  // of a pipelined pass the context runs (0 for a whole pass): state shared by the micro-batches
  // in flight (CheckpointedInputs) is kept per micro-batch. `meter` (null: a new one) is shared
  // with the contexts of the pass's other micro-batches, so its peak is the pass's.
  ForwardContext(ops::OpsBackend& ops, Stream& stream, const ParameterBinding<T>& params,
                 int64_t batch, int64_t seq, const int32_t* tokens, int micro_batch = 0,
                 std::shared_ptr<ActivationMeter> meter = nullptr);
  ForwardContext(ForwardContext&&) = default;
  ~ForwardContext();
  ForwardContext(const ForwardContext&) = delete;
  ForwardContext& operator=(const ForwardContext&) = delete;

  // Same backend, stream, parameters, geometry, tokens and micro-batch; nothing saved.
  ForwardContext Child() const;

  int micro_batch() const { return micro_batch_; }

  int64_t batch() const { return batch_; }
  int64_t seq() const { return seq_; }
  int64_t rows() const { return batch_ * seq_; }
  ops::Int32View tokens() const { return {tokens_, rows()}; }
  const ParameterBinding<T>& params() const { return *params_; }
  ops::OpsBackend& ops() const { return *ops_; }
  Stream& stream() const { return *stream_; }
  Device& device() const { return ops_->device(); }

  // A view of device memory in the compute dtype; null data gives the absent tensor (an
  // unwanted gradient, a missing bias).
  Tensor View(const T* data, Shape shape) const;
  Tensor View(Act<T> a) const { return View(a.data, {a.rows, a.cols}); }
  // dst = src, both [rows, cols] activations of one width, enqueued on the stream.
  Status Copy(Act<T> src, T* dst) const;
  // dst[r, 0:width] = src[r, 0:width] for r < rows, with rows src_cols and dst_cols elements
  // apart: the split and merge of a fused projection's column blocks.
  Status CopyColumns(const T* src, int64_t src_cols, T* dst, int64_t dst_cols, int64_t rows,
                     int64_t width) const;

  // A new saved buffer of `count` elements (category activations), appended to the module's
  // saved list.
  Result<T*> AllocateSaved(int module_id, int64_t count);
  // Appends a view owned by someone else (the module's input) to the module's saved list.
  void KeepSaved(int module_id, T* view);
  // The module's saved pointers, in the order they were allocated or kept.
  std::span<T* const> Saved(int module_id) const;
  void ReleaseSaved(int module_id);
  // The saved views of modules `ids` that pointed into [from, from + count) point at the same
  // offsets of `to` instead: a buffer freed after the forward and built again, elsewhere, before
  // the backward (sequence parallelism's gathered region input, engine/parallel/sequence_region.h).
  void RebaseSaved(std::span<const int> ids, const T* from, int64_t count, T* to);

  // A new gradient buffer of `count` elements (category activations), held until
  // ReleaseGrads(module_id).
  Result<T*> AllocateGrad(int module_id, int64_t count);
  void ReleaseGrads(int module_id);

  // A buffer for the duration of the caller's scope (category buffers).
  Result<Scratch<T>> AllocateScratch(int64_t count);

  // Split backward: from now on this context and its Child()ren defer the Linears' weight
  // gradients to `store` (deferred_weight_grads.h), which must be the micro-batch's own.
  void DeferWeightGradsTo(std::shared_ptr<DeferredWeightGrads<T>> store);
  bool defers_weight_grads() const { return deferred_ != nullptr; }
  // Queues `task` (dW += dyᵀ·x, W registry parameter `param`) for the micro-batch's
  // backward-weight: keeps x ([rows, in], by pinning the saved buffer of this context that holds
  // it, else as a copy) and a copy of dy. Only while defers_weight_grads().
  Status DeferWeightGrad(const T* x, int64_t in, Act<T> dy, int param,
                         std::function<Status(ForwardContext&, const T* x, const T* dy)> task);
  // Releases every saved and gradient buffer still held (a split backward's end: the context
  // lives on until the weight gradients ran, holding only what the store kept).
  void ReleaseAll();

  // Bytes held now, and at the peak, by this context and every context derived from it with
  // Child() (saved, grads and scratch).
  int64_t held_bytes() const { return meter_->current; }
  int64_t peak_bytes() const { return meter_->peak; }

 private:
  struct Slot {
    std::vector<T*> views;
    std::vector<DeviceBuffer> owned;
  };

  Result<DeviceBuffer> Allocate(int64_t count, MemoryCategory category);
  // Frees the buffers, but hands a deferred Linear's pinned input over to the store.
  void Drop(std::vector<DeviceBuffer>& buffers);
  // Whether `p` lies in a buffer of this context's saved state.
  bool OwnsSaved(const T* p) const;

  ops::OpsBackend* ops_;
  Stream* stream_;
  const ParameterBinding<T>* params_;
  int64_t batch_;
  int64_t seq_;
  const int32_t* tokens_;
  int micro_batch_;
  std::unordered_map<int, Slot> saved_;
  std::unordered_map<int, std::vector<DeviceBuffer>> grads_;
  std::shared_ptr<ActivationMeter> meter_;
  std::shared_ptr<DeferredWeightGrads<T>> deferred_;  // null: a fused backward
};

extern template class ForwardContext<float>;
extern template class ForwardContext<double>;

}  // namespace sluice::model
