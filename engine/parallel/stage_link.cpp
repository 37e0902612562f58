#include "engine/parallel/stage_link.h"

#include <fmt/format.h>

#include <utility>

#include "runtime/check.h"
#include "runtime/logging.h"

namespace sluice::parallel {

int TransferTag(TransferKind kind, int micro, int sender_chunk, int chunks) {
  SLUICE_CHECK(micro >= 0 && sender_chunk >= 0 && sender_chunk < chunks)
      << "micro-batch " << micro << ", chunk " << sender_chunk << " of " << chunks;
  return 1 + static_cast<int>(kind) + 2 * (micro * chunks + sender_chunk);
}

Status CheckTransferTags(int micro_batches, int chunks) {
  const int64_t largest = 2 + 2 * (int64_t{micro_batches} * chunks - 1);
  if (largest > kMaxTransferTag) {
    return InvalidArgumentError(
        "pipeline executor: {} micro-batches x {} chunks need p2p tags up to {}, past {} (the "
        "largest tag every MPI accepts); use at most {} micro-batches per step",
        micro_batches, chunks, largest, kMaxTransferTag, kMaxTransferTag / (2 * chunks));
  }
  return OkStatus();
}

StageLink::StageLink(zero::CommQueue& queue)
    : queue_(&queue), pending_(std::make_shared<Pending>()) {}

StageLink::~StageLink() {
  (void)queue_->Synchronize();
  const int left = AbandonSends();
  if (left > 0) {
    SLUICE_LOG(kWarn, "pipeline", "{} pipeline sends on {} never completed", left,
               queue_->comm().name());
  }
}

Status StageLink::Send(Stream& producer, const void* data, size_t count, DType dtype, int peer,
                       int tag, std::string what) {
  SLUICE_RETURN_IF_ERROR(queue_->OrderAfter(producer));
  std::shared_ptr<Pending> pending = pending_;
  // The task is named `what`: a failure of its own is reported with it (Device::LaunchHostFunc).
  auto post = [pending, data, count, dtype, peer, tag, what](Comm& comm) -> Status {
    CommHandle handle = comm.SendAsync(data, count, dtype, peer, tag);
    if (handle.finished()) return handle.Wait();  // refused at once: a broken communicator
    std::lock_guard lock(pending->mutex);
    pending->sends.push_back({std::move(handle), what});
    return OkStatus();
  };
  SLUICE_ASSIGN_OR_RETURN(zero::CommTicket ticket,
                          queue_->Enqueue(what, count * DTypeSize(dtype), std::move(post)));
  (void)ticket;  // posted and left: nothing waits for the send itself
  return OkStatus();
}

Result<zero::CommTicket> StageLink::Recv(void* data, size_t count, DType dtype, int peer, int tag,
                                         std::string what) {
  // Named `what`, as the send's task.
  auto receive = [data, count, dtype, peer, tag](Comm& comm) -> Status {
    return comm.RecvAsync(data, count, dtype, peer, tag).Wait();
  };
  return queue_->Enqueue(what, count * DTypeSize(dtype), std::move(receive));
}

Result<zero::CommTicket> StageLink::FinishSends() {
  std::shared_ptr<Pending> pending = pending_;
  auto finish = [pending](Comm&) -> Status {
    std::vector<PendingSend> sends;
    {
      std::lock_guard lock(pending->mutex);
      sends.swap(pending->sends);
    }
    Status first;
    for (PendingSend& send : sends) {
      Status status = send.handle.Wait();
      if (!status.ok() && first.ok()) first = std::move(status).WithContext(send.what);
    }
    return first;
  };
  return queue_->Enqueue("pipeline sends complete", 0, std::move(finish));
}

int StageLink::AbandonSends() {
  std::vector<PendingSend> sends;
  {
    std::lock_guard lock(pending_->mutex);
    sends.swap(pending_->sends);
  }
  // One Test each first starts every handle's clock, so together they wait one timeout.
  for (PendingSend& send : sends) (void)send.handle.Test();
  int left = 0;
  for (PendingSend& send : sends) {
    Status status = send.handle.Wait();
    if (!status.ok()) {
      ++left;
      SLUICE_LOG(kWarn, "pipeline", "{}: {}", send.what, status.ToString());
    }
  }
  return left;
}

}  // namespace sluice::parallel
