#include "engine/zero/reduce_scatter_reducer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "engine/zero/partition_copy.h"
#include "runtime/check.h"

namespace sluice::zero {

ReduceScatterReducer::ReduceScatterReducer(const model::ParameterRegistry& registry,
                                           const ShardLayout& layout, CommQueue& queue,
                                           Stream& compute, ZeroBinding& binding, float* grad_shard,
                                           bool shard_on_host, int64_t bucket_size,
                                           ops::OpsBackend& ops)
    : registry_(&registry),
      layout_(&layout),
      queue_(&queue),
      compute_(&compute),
      binding_(&binding),
      grad_shard_(grad_shard),
      bucket_size_(bucket_size),
      writes_(StorageUnitsReadBy(registry)),
      unit_grads_(registry.units().size()),
      ops_(&ops),
      shard_on_host_(shard_on_host),
      largest_piece_(LargestPiece()),
      in_open_(layout.partitions().size(), false) {}

ReduceScatterReducer::~ReduceScatterReducer() {
  // Buckets still queued read the unit buffers.
  (void)queue_->Synchronize();
}

size_t ReduceScatterReducer::LargestStagingBytes() const {
  return static_cast<size_t>(largest_piece_) * static_cast<size_t>(layout_->world()) *
         sizeof(float);
}

int64_t ReduceScatterReducer::LargestPiece() const {
  // The buckets AfterBackward forms when the units' backwards run in reverse registry order.
  int64_t largest = 0;
  int64_t open_numel = 0;
  std::vector<int> run;
  auto close = [&] {
    if (!run.empty()) largest = std::max(largest, RunElements(*layout_, run));
    run.clear();
    open_numel = 0;
  };
  for (size_t unit = layout_->units().size(); unit-- > 0;) {
    const std::vector<int>& all = layout_->units()[unit].all;
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      const int64_t numel = layout_->partitions()[static_cast<size_t>(*it)].numel;
      if (open_numel > 0 && open_numel + numel > bucket_size_) close();
      run.push_back(*it);
      open_numel += numel;
    }
  }
  close();
  return largest;
}

Status ReduceScatterReducer::BeginPass(bool /*boundary*/) {
  for (const DeviceBuffer& buffer : unit_grads_) SLUICE_CHECK(buffer.empty());
  SLUICE_CHECK(open_.run.empty());
  return OkStatus();
}

Status ReduceScatterReducer::BeforeBackward(int unit) {
  for (int owner : writes_[static_cast<size_t>(unit)]) {
    if (unit_grads_[static_cast<size_t>(owner)].empty()) SLUICE_RETURN_IF_ERROR(BindNew(owner));
  }
  return OkStatus();
}

Status ReduceScatterReducer::BindNew(int unit) {
  DeviceBuffer& buffer = unit_grads_[static_cast<size_t>(unit)];
  const model::UnitInfo& info = registry_->units()[static_cast<size_t>(unit)];
  if (info.numel == 0) return OkStatus();
  // Backward-inputs and backward-weights alternate on the host: no other pass of the unit runs.
  SLUICE_CHECK(buffer.empty()) << info.name;
  Result<DeviceBuffer> allocated = queue_->device().Allocate(
      static_cast<size_t>(info.numel) * sizeof(float), MemoryCategory::kGrads);
  if (!allocated.ok()) {
    return Status(allocated.status())
        .WithContext(fmt::format("allocating the gradients of {}", info.name));
  }
  buffer = std::move(allocated).value();
  // Zeroed on the compute stream, ahead of the backward ops that accumulate into it.
  SLUICE_RETURN_IF_ERROR(queue_->device().MemsetAsync(buffer.data(), 0, buffer.size(), *compute_));
  float* base = buffer.data_as<float>();
  for (int index : layout_->units()[static_cast<size_t>(unit)].all) {
    const PartitionInfo& p = layout_->partitions()[static_cast<size_t>(index)];
    binding_->SetGrad(p.param, base + (p.full_offset - info.offset));
  }
  live_gradient_elements_ += info.numel;
  stats_.peak_gradient_elements = std::max(stats_.peak_gradient_elements, live_gradient_elements_);
  return OkStatus();
}

void ReduceScatterReducer::Unbind(int unit) {
  for (int index : layout_->units()[static_cast<size_t>(unit)].all) {
    binding_->SetGrad(layout_->partitions()[static_cast<size_t>(index)].param, nullptr);
  }
}

Status ReduceScatterReducer::AfterBackward(int unit) { return Take(unit, nullptr); }

Status ReduceScatterReducer::AfterBackwardInput(int unit, std::span<const int> deferred) {
  return Take(unit, [deferred](int param) {
    return std::find(deferred.begin(), deferred.end(), param) == deferred.end();
  });
}

Status ReduceScatterReducer::BeforeBackwardWeight(int unit) { return BindNew(unit); }

Status ReduceScatterReducer::AfterBackwardWeight(int unit, std::span<const int> deferred) {
  return Take(unit, [deferred](int param) {
    return std::find(deferred.begin(), deferred.end(), param) != deferred.end();
  });
}

Status ReduceScatterReducer::Take(int unit, const std::function<bool(int param)>& take) {
  DeviceBuffer& buffer = unit_grads_[static_cast<size_t>(unit)];
  if (buffer.empty()) return OkStatus();  // owns no parameters
  const model::UnitInfo& info = registry_->units()[static_cast<size_t>(unit)];
  const std::vector<int>& all = layout_->units()[static_cast<size_t>(unit)].all;
  bool taken = false;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const PartitionInfo& p = layout_->partitions()[static_cast<size_t>(*it)];
    if (take != nullptr && !take(p.param)) continue;
    // A pipelined pass reduces the step's micro-batches in one pass, so a partition may come
    // again (another micro-batch's) while its last gradient waits in the open bucket, which
    // packs one source per partition; and units may come in another order than the reverse one
    // the staging memory is sized by.
    const bool again = in_open_[static_cast<size_t>(*it)];
    if (open_.numel > 0 && (again || open_.numel + p.numel > bucket_size_ ||
                            open_.piece + p.partition > largest_piece_)) {
      SLUICE_RETURN_IF_ERROR(Flush());
    }
    open_.run.push_back(*it);
    open_.sources.push_back(buffer.data_as<float>() + (p.full_offset - info.offset));
    open_.numel += p.numel;
    open_.piece += p.partition;
    in_open_[static_cast<size_t>(*it)] = true;
    taken = true;
  }
  Unbind(unit);
  live_gradient_elements_ -= info.numel;
  if (taken) {
    open_.release.push_back(std::move(buffer));
  } else {
    buffer.FreeAsync(*compute_);  // after the backward that wrote nothing the bucket needs
  }
  return OkStatus();
}

Status ReduceScatterReducer::Retire() {
  SLUICE_RETURN_IF_ERROR(queue_->Join(*compute_, in_flight_.front()));
  in_flight_.pop_front();
  return OkStatus();
}

Status ReduceScatterReducer::Flush() {
  if (open_.run.empty()) return OkStatus();
  if (static_cast<int>(in_flight_.size()) >= kMaxBucketsInFlight) {
    SLUICE_RETURN_IF_ERROR(Retire());
  }
  // The bucket's gradients are written by the backward enqueued so far.
  SLUICE_RETURN_IF_ERROR(queue_->OrderAfter(*compute_));
  Bucket bucket = std::move(open_);
  open_ = Bucket();
  for (int index : bucket.run) in_open_[static_cast<size_t>(index)] = false;
  const int64_t piece = RunElements(*layout_, bucket.run);
  const int64_t total = piece * layout_->world();
  SLUICE_ASSIGN_OR_RETURN(void* staging, queue_->Staging(static_cast<size_t>(total) * sizeof(float),
                                                         "a gradient reduce-scatter bucket"));
  float* full = static_cast<float*>(staging);
  if (shard_on_host_ && host_piece_.empty()) {
    SLUICE_ASSIGN_OR_RETURN(
        host_piece_, queue_->device().AllocatePinnedHost(LargestStagingBytes() / layout_->world(),
                                                         MemoryCategory::kGrads));
  }
  SLUICE_ASSIGN_OR_RETURN(const BucketMoves* moves, MovesFor(bucket.run));
  Stream& stream = queue_->stream();
  Device& device = queue_->device();
  const int index = device.index();
  const Tensor staging_view(full, DType::kF32, {total}, MemoryTier::kDevice, index);
  for (size_t i = 0; i < bucket.run.size(); ++i) {
    const PartitionInfo& p = layout_->partitions()[static_cast<size_t>(bucket.run[i])];
    SLUICE_RETURN_IF_ERROR(
        ops_->CopySegments(stream,
                           Tensor(const_cast<float*>(bucket.sources[i]), DType::kF32, {p.numel},
                                  MemoryTier::kDevice, index),
                           staging_view, moves->packs[i]->list()));
  }
  float* mine = full + layout_->rank() * piece;
  const auto accumulate = [&](Stream& s) -> Status {
    if (!shard_on_host_) {
      return ops_->AccumulateSegments(
          s, Tensor(mine, DType::kF32, {piece}, MemoryTier::kDevice, index),
          Tensor(grad_shard_, DType::kF32, {layout_->shard_elements()}, MemoryTier::kDevice, index),
          moves->accumulate->list());
    }
    float* host_piece = host_piece_.data_as<float>();
    SLUICE_RETURN_IF_ERROR(device.CopyAsync(
        host_piece, mine, static_cast<size_t>(piece) * sizeof(float), CopyKind::kD2H, s));
    return device.LaunchHostFunc(
        s,
        [layout = layout_, run = bucket.run, host_piece, grad_shard = grad_shard_] {
          AccumulateIntoShard(*layout, run, host_piece, grad_shard);
          return OkStatus();
        },
        "accumulate a reduced gradient bucket into the host shard");
  };
  SLUICE_ASSIGN_OR_RETURN(CommTicket ticket,
                          queue_->Enqueue(
                              fmt::format("reduce_scatter grads ({} params, {} elements)",
                                          bucket.run.size(), bucket.numel),
                              static_cast<uint64_t>(total) * sizeof(float),
                              [full, mine, total](Comm& comm) {
                                return comm.ReduceScatter(full, mine, static_cast<size_t>(total),
                                                          DType::kF32, ReduceOp::kAvg);
                              },
                              accumulate));
  // Read by the packing, after the backward that wrote them (the comm stream is ordered after
  // it): free once the comm stream is past the packing.
  for (DeviceBuffer& source : bucket.release) source.FreeAsync(stream);
  in_flight_.push_back(std::move(ticket));
  ++stats_.buckets;
  stats_.reduced_elements += bucket.numel;
  return OkStatus();
}

Result<const ReduceScatterReducer::BucketMoves*> ReduceScatterReducer::MovesFor(
    const std::vector<int>& run) {
  auto found = moves_.find(run);
  if (found != moves_.end()) return &found->second;
  // The buckets repeat from pass to pass: each run's lists are built and uploaded once.
  BucketMoves moves;
  for (const std::vector<ops::CopySegment>& list : PackSegments(*layout_, run)) {
    SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<DeviceSegments> pack,
                            DeviceSegments::Create(queue_->stream(), list, "a gradient packing"));
    moves.packs.push_back(std::move(pack));
  }
  SLUICE_ASSIGN_OR_RETURN(
      moves.accumulate,
      DeviceSegments::Create(queue_->stream(), AccumulateIntoShardSegments(*layout_, run),
                             "a gradient accumulation"));
  return &moves_.emplace(run, std::move(moves)).first->second;
}

Status ReduceScatterReducer::EndPass() {
  SLUICE_RETURN_IF_ERROR(Flush());
  while (!in_flight_.empty()) SLUICE_RETURN_IF_ERROR(Retire());
  for (size_t u = 0; u < unit_grads_.size(); ++u) {
    if (unit_grads_[u].empty()) continue;
    // A unit whose backward never ran (a pass without backward) leaves its buffer bound.
    Unbind(static_cast<int>(u));
    live_gradient_elements_ -= registry_->units()[u].numel;
    unit_grads_[u].FreeAsync(*compute_);
  }
  return OkStatus();
}

}  // namespace sluice::zero
