// The point-to-point transfers of one pipeline stage with its neighbours (pipeline_executor.h):
// activations toward the next virtual stage, their gradients toward the previous one, on the
// comm stream of a CommQueue over the pipeline group, ordered against the compute streams by
// events, never by a blocking host wait.
//
//   - A send waits (stream-side) for the compute that wrote its buffer, then is posted and left:
//     the comm stream goes on at once, and the send completes while later operations run.
//     FinishSends enqueues the wait for every send still pending, at the end of the step.
//   - A receive holds the comm stream until its data has arrived (or the communicator's timeout
//     passed); the compute that reads it waits for its ticket (CommQueue::Join).
// This is the model the schedule validator checks for deadlocks (schedule_timeline.h): sends cost
// nothing, a receive waits for its data, each stage runs its list in order.
//
// Tags. Each transfer has a tag of its own, made of its kind (activation or gradient), its
// micro-batch and the sender's chunk, so a receive takes exactly the transfer it names: an
// activation can never be taken for a gradient, nor one micro-batch's data for another's. Between
// two ranks the activations and the gradients are still two ordered streams (the schedule sends
// and receives each in the same order), which is all a backend that matches by order needs.
//
// Failures. A receive that times out fails the comm stream with an error naming the instruction,
// the peer stage and the communicator's own account of the late rank; everything enqueued after
// it is skipped (the MPI backend cancels the receive itself). AbandonSends then gives up the
// sends still pending (together bounded by the timeout); the communicator keeps those it could not
// finish ("stranded", runtime/comm.h), and their buffers must stay alive until Comm::Drain()
// succeeds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/zero/comm_queue.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

namespace sluice::parallel {

enum class TransferKind : uint8_t { kActivation = 0, kGrad = 1 };

// The least MPI_TAG_UB the MPI standard allows: the largest tag every MPI accepts.
inline constexpr int kMaxTransferTag = 32767;

// The tag of the transfer of `kind` for micro-batch `micro`, sent by the sender's chunk
// `sender_chunk` of `chunks`: 1 + kind + 2 * (micro * chunks + sender_chunk).
int TransferTag(TransferKind kind, int micro, int sender_chunk, int chunks);
// OK, or InvalidArgument when some tag of a step of `micro_batches` and `chunks` would pass
// kMaxTransferTag.
Status CheckTransferTags(int micro_batches, int chunks);

class StageLink {
 public:
  // `queue` (its communicator: the pipeline group, rank = stage) must outlive the link.
  explicit StageLink(zero::CommQueue& queue);
  // Gives up whatever is still pending (AbandonSends).
  ~StageLink();

  StageLink(const StageLink&) = delete;
  StageLink& operator=(const StageLink&) = delete;

  // Posts the send of `count` elements at `data` (device memory, alive and unwritten until the
  // send completed: after FinishSends' ticket, or AbandonSends) to pipeline rank `peer`, once
  // the work enqueued on `producer` so far has run. `what` names the transfer in errors.
  Status Send(Stream& producer, const void* data, size_t count, DType dtype, int peer, int tag,
              std::string what);
  // Enqueues the receive of `count` elements into `data` (device memory) from `peer`; the
  // ticket completes when the data is there. `what` names the transfer in errors.
  Result<zero::CommTicket> Recv(void* data, size_t count, DType dtype, int peer, int tag,
                                std::string what);
  // Enqueues the wait for every send posted so far; the ticket completes when they all did.
  Result<zero::CommTicket> FinishSends();
  // Host side, with the comm stream idle (synchronized): waits for the sends still pending after
  // a failure, all of them together within one timeout, and drops them (the communicator keeps
  // the ones that did not finish). Returns how many did not finish.
  int AbandonSends();

 private:
  struct PendingSend {
    CommHandle handle;
    std::string what;
  };
  // Touched by the comm stream's tasks, and by the host only when the stream is idle; the mutex
  // keeps the two apart all the same.
  struct Pending {
    std::mutex mutex;
    std::vector<PendingSend> sends;
  };

  zero::CommQueue* queue_;
  std::shared_ptr<Pending> pending_;
};

}  // namespace sluice::parallel
