#include "engine/zero/parameter_publisher.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>

namespace sluice::zero {

Result<std::unique_ptr<ParameterPublisher>> ParameterPublisher::Create(
    const ParameterPublisherOptions& options, const ShardLayout& layout, ops::OpsBackend& ops,
    Stream& compute, CommQueue& queue, void* param_shard, float* full_params) {
  std::unique_ptr<ParameterPublisher> publisher(
      new ParameterPublisher(options, layout, ops, compute, queue, param_shard, full_params));
  if (options.stage == 1 || options.stage == 2) {
    publisher->buckets_ = publisher->BucketsOf();
    for (const Bucket& bucket : publisher->buckets_) {
      std::vector<int> run;
      for (size_t i = bucket.first; i < bucket.last; ++i) run.push_back(static_cast<int>(i));
      SLUICE_ASSIGN_OR_RETURN(
          std::unique_ptr<DeviceSegments> unpack,
          DeviceSegments::Create(queue.stream(), UnpackGatheredSegments(layout, run),
                                 "the parameter unpacking segments"));
      publisher->unpack_.push_back(std::move(unpack));
    }
  }
  return publisher;
}

std::vector<ParameterPublisher::Bucket> ParameterPublisher::BucketsOf() const {
  std::vector<Bucket> buckets;
  const int world = layout_->world();
  const std::vector<PartitionInfo>& partitions = layout_->partitions();
  for (size_t first = 0; first < partitions.size();) {
    Bucket bucket{first, first, 0};
    while (bucket.last < partitions.size() &&
           (bucket.last == first || (bucket.piece + partitions[bucket.last].partition) * world <=
                                        options_.allgather_bucket_size)) {
      bucket.piece += partitions[bucket.last].partition;
      ++bucket.last;
    }
    buckets.push_back(bucket);
    first = bucket.last;
  }
  return buckets;
}

size_t ParameterPublisher::LargestStagingBytes() const {
  size_t largest = 0;
  for (const Bucket& bucket : buckets_) {
    largest = std::max(largest, static_cast<size_t>(bucket.piece) *
                                    static_cast<size_t>(layout_->world()) *
                                    DTypeSize(options_.param_dtype));
  }
  return largest;
}

Status ParameterPublisher::Publish() {
  if (options_.stage == 0) return Widen();
  // The all-gathers read the parameter shard from the comm stream: the optimizer's update on the
  // compute stream comes first.
  SLUICE_RETURN_IF_ERROR(queue_->OrderAfter(*compute_));
  return AllGather();
}

// Stage 0 widens the updated bf16 / f16 parameters into the compute copy on the compute stream, in
// order with the optimizer before it and the next pass after it.
Status ParameterPublisher::Widen() {
  if (options_.param_dtype == DType::kF32 || layout_->total_elements() == 0) return OkStatus();
  const int index = ops_->device().index();
  return ops_->Convert(
      *compute_,
      Tensor(param_shard_, options_.param_dtype, {layout_->total_elements()}, MemoryTier::kDevice,
             index),
      Tensor(full_params_, DType::kF32, {layout_->total_elements()}, MemoryTier::kDevice, index));
}

Status ParameterPublisher::AllGather() {
  const int world = layout_->world();
  const DType dtype = options_.param_dtype;
  const size_t element_size = DTypeSize(dtype);
  float* full = full_params_;
  const int index = ops_->device().index();
  std::deque<CommTicket> tickets;
  Status status;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    const size_t first = bucket.first;
    const size_t last = bucket.last;
    const size_t total = static_cast<size_t>(bucket.piece) * static_cast<size_t>(world);
    const void* shard =
        static_cast<const uint8_t*>(param_shard_) +
        static_cast<size_t>(layout_->partitions()[first].shard_offset) * element_size;
    Result<void*> staging = queue_->Staging(total * element_size, "a parameter all-gather bucket");
    if (!staging.ok()) {
      status = staging.status();
      break;
    }
    void* gathered = *staging;
    // The unpacking is device work on the comm stream after the gather, in the same ticket.
    const ops::CopySegmentList& unpack = unpack_[b]->list();
    const auto then = [&](Stream& stream) {
      return ops_->CopySegments(
          stream,
          Tensor(gathered, dtype, {static_cast<int64_t>(total)}, MemoryTier::kDevice, index),
          Tensor(full, DType::kF32, {layout_->total_elements()}, MemoryTier::kDevice, index),
          unpack);
    };
    Result<CommTicket> ticket = queue_->Enqueue(
        fmt::format("all_gather updated parameters [{}, {})", first, last), total * element_size,
        [dtype, total, shard, gathered](Comm& comm) {
          return comm.AllGather(shard, gathered, total, dtype);
        },
        then);
    if (!ticket.ok()) {
      status = ticket.status();
      break;
    }
    tickets.push_back(std::move(ticket).value());
  }
  // The next pass reads the compute copy after the gathers, in the compute stream's order.
  for (CommTicket& ticket : tickets) {
    Status joined = queue_->Join(*compute_, ticket);
    if (status.ok()) status = std::move(joined);
  }
  return status;
}

}  // namespace sluice::zero
