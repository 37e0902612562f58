// The comm stream: the engine's collectives run, in the order they were enqueued, on a device
// stream of their own (a worker thread on the CPU backend), so a parameter all-gather or a
// gradient reduce-scatter overlaps the compute of the calling thread. Each operation completes a
// ticket (an event) that the compute side waits on before touching its buffers; nothing else
// orders the two sides. Every operation is recorded in the trace lane "comm".
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
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

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
  // Waits for the enqueued work (each operation is bounded by the communicator's timeout).
  ~CommQueue();

  Comm& comm() const { return *comm_; }
  Stream& stream() const { return *stream_; }
  Device& device() const { return *device_; }
  bool overlap() const { return overlap_; }

  // Enqueues op(comm()) on the comm stream, traced as `name` with `bytes`.
  Result<CommTicket> Enqueue(std::string name, uint64_t bytes, std::function<Status(Comm&)> op);
  // Blocks until the ticket's operation finished; its error (or an earlier one) if it failed.
  // The ticket is complete afterwards.
  Status Wait(CommTicket& ticket);
  // Enqueue + Wait: the engine's small control collectives.
  Status Run(std::string name, std::function<Status(Comm&)> op);
  // Waits for everything enqueued so far.
  Status Synchronize() { return stream_->Synchronize(); }

  // A buffer of a collective that failed: the communicator may still write into it (a timed-out
  // operation stays posted, runtime/comm.h), so it is freed only after the communicator is
  // gone. Thread-safe (called from operations on the stream).
  void KeepWhileCommLives(DeviceBuffer buffer);

 private:
  CommQueue() = default;

  Device* device_ = nullptr;
  bool overlap_ = false;
  // Destroyed in this order by ~CommQueue: the stream (its pending work uses the communicator),
  // the communicator, then the buffers it may still have owned.
  std::unique_ptr<Comm> comm_;
  std::unique_ptr<Stream> stream_;
  std::mutex kept_mu_;
  std::vector<DeviceBuffer> kept_;
};

// The staging buffer of one operation's collective, allocated by the operation when it runs
// (category buffers) and released when it ends. Operations run one at a time, so the staging
// held at any moment is that of a single collective. `what` names it in errors.
Result<DeviceBuffer> AllocateStaging(CommQueue& queue, size_t bytes, std::string_view what);
// The end of an operation's use of `staging`: freed, or kept by the queue when the collective
// failed (`status`), since a timed-out collective may still write into it.
Status ReleaseStaging(CommQueue& queue, DeviceBuffer& staging, Status status);

}  // namespace sluice::zero
