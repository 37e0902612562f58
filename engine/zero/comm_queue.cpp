#include "engine/zero/comm_queue.h"

#include <fmt/format.h>

#include <utility>

#include "runtime/trace.h"

namespace sluice::zero {

Result<std::unique_ptr<CommQueue>> CommQueue::Create(Device& device, std::unique_ptr<Comm> comm,
                                                     bool overlap) {
  std::unique_ptr<CommQueue> queue(new CommQueue());
  queue->device_ = &device;
  queue->overlap_ = overlap;
  queue->comm_ = std::move(comm);
  SLUICE_ASSIGN_OR_RETURN(queue->stream_, device.CreateStream());
  return queue;
}

CommQueue::~CommQueue() {
  if (stream_ != nullptr) (void)stream_->Synchronize();
  stream_.reset();
  comm_.reset();
  kept_.clear();
}

void CommQueue::KeepWhileCommLives(DeviceBuffer buffer) {
  std::lock_guard lock(kept_mu_);
  kept_.push_back(std::move(buffer));
}

Result<CommTicket> CommQueue::Enqueue(std::string name, uint64_t bytes,
                                      std::function<Status(Comm&)> op) {
  Comm* comm = comm_.get();
  auto task = [comm, name, bytes, op = std::move(op)]() -> Status {
    ScopedTraceEvent event(kTraceLaneComm, name, bytes);
    return op(*comm);
  };
  SLUICE_RETURN_IF_ERROR(device_->LaunchHostFunc(*stream_, std::move(task), name));
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Event> event, device_->CreateEvent());
  SLUICE_RETURN_IF_ERROR(event->Record(*stream_));
  CommTicket ticket;
  ticket.event_ = std::shared_ptr<Event>(std::move(event));
  if (!overlap_) SLUICE_RETURN_IF_ERROR(Wait(ticket));
  return ticket;
}

Status CommQueue::Wait(CommTicket& ticket) {
  if (ticket.event_ == nullptr) return OkStatus();
  Status status = ticket.event_->Synchronize();
  ticket.event_.reset();
  return status;
}

Status CommQueue::Run(std::string name, std::function<Status(Comm&)> op) {
  SLUICE_ASSIGN_OR_RETURN(CommTicket ticket, Enqueue(std::move(name), 0, std::move(op)));
  return Wait(ticket);
}

Result<DeviceBuffer> AllocateStaging(CommQueue& queue, size_t bytes, std::string_view what) {
  Result<DeviceBuffer> buffer = queue.device().Allocate(bytes, MemoryCategory::kBuffers);
  if (!buffer.ok()) return Status(buffer.status()).WithContext(fmt::format("allocating {}", what));
  return buffer;
}

Status ReleaseStaging(CommQueue& queue, DeviceBuffer& staging, Status status) {
  if (status.ok()) {
    staging.Reset();
  } else {
    queue.KeepWhileCommLives(std::move(staging));
  }
  return status;
}

}  // namespace sluice::zero
