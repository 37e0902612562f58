#include "engine/zero/comm_queue.h"

#include <fmt/format.h>

#include <utility>

#include "runtime/check.h"
#include "runtime/trace.h"

namespace sluice::zero {

Result<std::unique_ptr<CommQueue>> CommQueue::Create(Device& device, std::unique_ptr<Comm> comm,
                                                     bool overlap) {
  return Create(
      device, [&comm](Stream&) -> Result<std::unique_ptr<Comm>> { return std::move(comm); },
      overlap);
}

Result<std::unique_ptr<CommQueue>> CommQueue::Create(Device& device, const CommFactory& make_comm,
                                                     bool overlap) {
  std::unique_ptr<CommQueue> queue(new CommQueue());
  queue->device_ = &device;
  queue->overlap_ = overlap;
  SLUICE_ASSIGN_OR_RETURN(queue->stream_, device.CreateStream());
  SLUICE_ASSIGN_OR_RETURN(queue->comm_, make_comm(*queue->stream_));
  if (void* native = queue->comm_->native_stream(); native != nullptr) {
    SLUICE_CHECK(native == queue->stream_->native())
        << "a stream-ordered communicator must enqueue on the queue's stream";
    queue->native_ = true;
  }
  return queue;
}

CommQueue::~CommQueue() {
  if (stream_ != nullptr) (void)stream_->Synchronize();
  if (stream_ != nullptr) staging_.FreeAsync(*stream_);
  // NCCL only borrows the stream; it meets its peers when destroyed, before the stream goes.
  if (native_) comm_.reset();
  stream_.reset();
  comm_.reset();
}

Result<void*> CommQueue::Staging(size_t bytes, std::string_view what) {
  if (staging_.size() < bytes) {
    staging_.FreeAsync(*stream_);
    Result<DeviceBuffer> buffer = device_->AllocateAsync(bytes, MemoryCategory::kBuffers, *stream_);
    if (!buffer.ok()) {
      return Status(buffer.status()).WithContext(fmt::format("allocating {}", what));
    }
    staging_ = std::move(buffer).value();
  }
  return staging_.data();
}

Result<CommTicket> CommQueue::Enqueue(std::string name, uint64_t bytes,
                                      std::function<Status(Comm&)> op,
                                      const std::function<Status(Stream&)>& then) {
  Comm* comm = comm_.get();
  if (native_) {
    SLUICE_RETURN_IF_ERROR(op(*comm));
  } else {
    auto task = [comm, name, bytes, op = std::move(op)]() -> Status {
      ScopedTraceEvent event(kTraceLaneComm, name, bytes);
      return op(*comm);
    };
    SLUICE_RETURN_IF_ERROR(device_->LaunchHostFunc(*stream_, std::move(task), name));
  }
  if (then) SLUICE_RETURN_IF_ERROR(then(*stream_));
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Event> event, device_->CreateEvent());
  SLUICE_RETURN_IF_ERROR(event->Record(*stream_));
  CommTicket ticket;
  ticket.event_ = std::shared_ptr<Event>(std::move(event));
  if (!overlap_) SLUICE_RETURN_IF_ERROR(Wait(ticket));
  return ticket;
}

Status CommQueue::OrderAfter(Stream& producer) {
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Event> event, device_->CreateEvent());
  SLUICE_RETURN_IF_ERROR(event->Record(producer));
  return stream_->WaitEvent(*event);
}

Status CommQueue::Join(Stream& consumer, CommTicket& ticket) {
  if (ticket.event_ == nullptr) return OkStatus();
  SLUICE_RETURN_IF_ERROR(consumer.WaitEvent(*ticket.event_));
  ticket.event_.reset();
  return OkStatus();
}

Status CommQueue::Wait(CommTicket& ticket) {
  if (ticket.event_ == nullptr) return OkStatus();
  Status status = ticket.event_->Synchronize();
  ticket.event_.reset();
  return status;
}

Status CommQueue::Run(std::string name, std::function<Status(Comm&)> op) {
  if (native_) {
    ScopedTraceEvent event(kTraceLaneComm, name, 0);
    return op(comm_->host());
  }
  SLUICE_ASSIGN_OR_RETURN(CommTicket ticket, Enqueue(std::move(name), 0, std::move(op)));
  return Wait(ticket);
}

}  // namespace sluice::zero
