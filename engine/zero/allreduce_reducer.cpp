#include "engine/zero/allreduce_reducer.h"

#include <fmt/format.h>

#include "runtime/check.h"

namespace sluice::zero {

AllReduceReducer::AllReduceReducer(const model::ParameterRegistry& registry, CommQueue& queue,
                                   Stream& compute, ops::OpsBackend& ops, float* full_grads,
                                   int64_t bucket_size, GradientScaling scaling)
    : registry_(&registry),
      queue_(&queue),
      compute_(&compute),
      ops_(&ops),
      full_grads_(full_grads),
      bucket_size_(bucket_size),
      scaling_(scaling) {}

Status AllReduceReducer::ScaleOnCompute(int64_t offset, int64_t count, float factor) {
  const Tensor range(full_grads_ + offset, DType::kF32, {count}, MemoryTier::kDevice,
                     ops_->device().index());
  return ops_->Scale(*compute_, range, factor);
}

Status AllReduceReducer::BeginPass(bool boundary) {
  SLUICE_CHECK_EQ(pending_count_, 0);
  SLUICE_CHECK(to_scale_after_.empty());
  boundary_ = boundary;
  return OkStatus();
}

Status AllReduceReducer::AfterBackward(int unit) {
  if (!boundary_) return OkStatus();
  const model::UnitInfo& info = registry_->units()[static_cast<size_t>(unit)];
  if (info.numel == 0) return OkStatus();
  // Backward runs the units in reverse, so the open bucket grows downwards; a split backward
  // finishes units out of that order (a stage's embeddings at the backward-input, its blocks at
  // the backward-weight), and a unit not adjacent to the open bucket starts the next.
  const bool adjacent = info.offset + info.numel == pending_offset_;
  if (pending_count_ > 0 && (pending_count_ + info.numel > bucket_size_ || !adjacent)) {
    SLUICE_RETURN_IF_ERROR(Flush());
  }
  pending_offset_ = info.offset;
  pending_count_ += info.numel;
  return OkStatus();
}

Status AllReduceReducer::Flush() {
  if (pending_count_ == 0) return OkStatus();
  // The bucket's gradients are written by the backward enqueued so far: the scaling before the
  // sum follows it on the compute stream, and the collective follows both.
  if (scaling_.before != 1.0f) {
    SLUICE_RETURN_IF_ERROR(ScaleOnCompute(pending_offset_, pending_count_, scaling_.before));
  }
  SLUICE_RETURN_IF_ERROR(queue_->OrderAfter(*compute_));
  float* data = full_grads_ + pending_offset_;
  const size_t count = static_cast<size_t>(pending_count_);
  const ReduceOp op = scaling_.op;
  SLUICE_ASSIGN_OR_RETURN(CommTicket ticket,
                          queue_->Enqueue(fmt::format("all_reduce grads [{}, {})", pending_offset_,
                                                      pending_offset_ + pending_count_),
                                          count * sizeof(float), [data, count, op](Comm& comm) {
                                            return comm.AllReduce(data, count, DType::kF32, op);
                                          }));
  in_flight_.push_back(std::move(ticket));
  if (scaling_.after != 1.0f) to_scale_after_.emplace_back(pending_offset_, pending_count_);
  ++stats_.buckets;
  stats_.reduced_elements += pending_count_;
  pending_count_ = 0;
  return OkStatus();
}

Status AllReduceReducer::EndPass() {
  if (boundary_) SLUICE_RETURN_IF_ERROR(Flush());
  for (; !in_flight_.empty(); in_flight_.pop_front()) {
    SLUICE_RETURN_IF_ERROR(queue_->Join(*compute_, in_flight_.front()));
  }
  // After the joins: the compute stream has the reduced sums.
  for (const auto& [offset, count] : to_scale_after_) {
    SLUICE_RETURN_IF_ERROR(ScaleOnCompute(offset, count, scaling_.after));
  }
  to_scale_after_.clear();
  return OkStatus();
}

}  // namespace sluice::zero
