// The tensor-parallel collectives of a model's passes: Megatron's f and g (tensor_region.h) sum an
// activation or its gradient over the tensor ranks, in place; with sequence parallelism
// (sequence_region.h) all-gathers and reduce-scatters of the rows take their place; on a comm
// stream of the model's own, ordered against the compute stream by events
// (engine/zero/comm_queue.h): the all-reduce starts once the compute stream has written the data,
// and the compute stream's next work waits for it. The host enqueues and never waits, nor touches
// the data.
//
// The communicator is the plan's own copy of the tensor group (split from the one passed at
// build), so its collectives never interleave with another user's of the same ranks; every
// tensor rank runs the same passes, so they issue the all-reduces in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/zero/comm_queue.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::parallel {

class TensorComm {
 public:
  // Collective over `tensor`: splits it into the queue's own communicator. `device` must outlive
  // the TensorComm.
  static Result<std::unique_ptr<TensorComm>> Create(Comm& tensor, Device& device);

  int rank() const { return queue_->comm().rank(); }
  int size() const { return queue_->comm().size(); }

  // data[0 .. count) = its sum over the tensor ranks, in place, between the work enqueued on
  // `compute` so far and what is enqueued there next. `name` labels the operation in the trace
  // (lane "comm") and in errors.
  template <typename T>
  Status AllReduce(Stream& compute, T* data, int64_t count, std::string name);

  // full[0 .. size() * count) = every tensor rank's `count` elements in rank order, this rank's
  // already in place at full[rank() * count ..). Stream-ordered as AllReduce.
  template <typename T>
  Status AllGather(Stream& compute, T* full, int64_t count, std::string name);

  // shard[0 .. count) = the sum over the tensor ranks of their full[rank() * count ..
  // (rank() + 1) * count), where full has size() * count elements. `shard` may be that piece of
  // `full` itself (in place; the rest of `full` is clobbered). Stream-ordered as AllReduce.
  template <typename T>
  Status ReduceScatter(Stream& compute, T* full, T* shard, int64_t count, std::string name);

  // Waits for every enqueued collective (teardown).
  Status Synchronize() { return queue_->Synchronize(); }

 private:
  explicit TensorComm(std::unique_ptr<zero::CommQueue> queue) : queue_(std::move(queue)) {}

  std::unique_ptr<zero::CommQueue> queue_;
};

}  // namespace sluice::parallel
