// The comm stream: the engine's collectives run, in the order they were enqueued, on a device
// stream of their own (a worker thread on the CPU backend, the progress worker of MPI; on a GPU
// the stream NCCL enqueues on), so a parameter all-gather or a gradient reduce-scatter overlaps
// the compute stream. The two streams are ordered by events only, as CUDA streams are, and the
// host thread that enqueues blocks on neither (NCCL's blocking calls aside: CommQueue::Enqueue):
//   - OrderAfter(compute): the operations enqueued next start once the compute stream has
//     finished the work enqueued on it so far (the gradients they reduce are written, the memory
//     they gather into is no longer read);
//   - Join(compute, ticket): work enqueued on the compute stream next starts once the ticket's
//     operation has finished (a failed operation's error becomes the compute stream's error).
// Wait() blocks the host instead: for the step boundary, teardown and the control collectives.
// Every operation is recorded in the trace lane "comm".
//
// One stream issues every collective of the engine's communicator, so all ranks issue them in
// the same order as long as they enqueue the same operations in the same order (runtime/comm.h).
// With overlap_comm off each operation is waited for as soon as it is enqueued.
//
// A failed operation (a timeout naming the late ranks) is sticky: later operations are skipped,
// and every later Wait returns that error.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::zero {

// Completion of one enqueued operation. A default ticket is complete.
class CommTicket {
 public:
  CommTicket() = default;
  bool pending() const { return event_ != nullptr; }

 private:
  friend class CommQueue;
  std::shared_ptr<Event> event_;
};

class CommQueue {
 public:
  // Takes the communicator the engine owns; `device` must outlive the queue.
  static Result<std::unique_ptr<CommQueue>> Create(Device& device, std::unique_ptr<Comm> comm,
                                                   bool overlap);
  // With the communicator made for the queue's stream: a stream-ordered one (NCCL) must enqueue
  // on it (Comm::native_stream()).
  using CommFactory = std::function<Result<std::unique_ptr<Comm>>(Stream& stream)>;
  static Result<std::unique_ptr<CommQueue>> Create(Device& device, const CommFactory& make_comm,
                                                   bool overlap);
  // Waits for the enqueued work (each operation is bounded by the communicator's timeout).
  ~CommQueue();

  Comm& comm() const { return *comm_; }
  Stream& stream() const { return *stream_; }
  Device& device() const { return *device_; }
  bool overlap() const { return overlap_; }

  // Enqueues op(comm()) on the comm stream, traced as `name` with `bytes`: as a host function
  // for MPI; for a stream-ordered communicator (NCCL) op runs now, on this thread, and enqueues
  // the collective itself (its lambda must not touch device memory either way). `then`, when given,
  // enqueues device work of its own on the comm stream after the op (the unpacking of what it
  // gathered), part of the same ticket; it is called on this thread, now.
  Result<CommTicket> Enqueue(std::string name, uint64_t bytes, std::function<Status(Comm&)> op,
                             const std::function<Status(Stream&)>& then = nullptr);
  // The operations enqueued from now on run after the work enqueued on `producer` so far.
  Status OrderAfter(Stream& producer);
  // The work enqueued on `consumer` from now on runs after the ticket's operation; the ticket is
  // complete afterwards (for this side: later Waits return at once).
  Status Join(Stream& consumer, CommTicket& ticket);
  // Blocks until the ticket's operation finished; its error (or an earlier one) if it failed.
  // The ticket is complete afterwards.
  Status Wait(CommTicket& ticket);
  // The engine's small control collectives, on host memory: Enqueue + Wait, or with a
  // stream-ordered communicator op(comm().host()) now, on this thread.
  Status Run(std::string name, std::function<Status(Comm&)> op);
  // Waits for everything enqueued so far.
  Status Synchronize() { return stream_->Synchronize(); }

  // The staging memory (at least `bytes`, category buffers; `what` names it in errors) of the
  // operation enqueued next: one buffer of the queue, reused by every operation, since they run
  // one at a time on the comm stream. The engine sizes it for its largest collective when it is
  // created; an operation that needs more grows it (a stream-ordered reallocation). After a
  // failed collective later operations are skipped, and its memory is never reused (a timed-out
  // collective may still write into it; runtime/device.h).
  Result<void*> Staging(size_t bytes, std::string_view what);

 private:
  CommQueue() = default;

  Device* device_ = nullptr;
  bool overlap_ = false;
  bool native_ = false;  // the communicator enqueues on stream_ itself (NCCL)
  // Destroyed in this order by ~CommQueue: the stream (its pending work uses the communicator),
  // then the communicator.
  std::unique_ptr<Comm> comm_;
  std::unique_ptr<Stream> stream_;
  DeviceBuffer staging_;  // allocated on stream_
};

}  // namespace sluice::zero
