// ArrivalResponder: answers, from a thread of its own, other nodes' questions about the arrival
// boards (arrival_board.h) of communicators that span nodes.
//
// A rank reads the arrival slots of its own node's ranks from shared memory. It cannot read a
// rank of another node that way, and MPI's one-sided reads are no substitute over TCP: without
// an RDMA network they need the target to call into MPI (Open MPI's osc ucx over UCX's tcp
// transport then waits forever for a stopped target), or they are not offered at all (Debian's
// Open MPI 4.1 disables osc ucx and osc pt2pt, pt2pt refuses MPI_THREAD_MULTIPLE anyway, and
// osc rdma needs an RDMA-capable btl, which tcp is not). So a process on a board that spans
// nodes asks: it sends a query to each rank it cannot read, and that rank's responder thread
// answers with the marks of its node's ranks. The thread keeps a receive posted on each such
// board's query communicator and polls it every 10 ms (a blocking MPI wait would spin a core),
// so a running process answers at once even while its main thread computes or blocks; a stopped
// or dead process cannot answer, which is how the asker names it. Its MPI calls progress every
// request of the process, so it may touch CPU device memory (see AllowEveryProtectionKey).
//
// Messages are int64 arrays: the query {round}, the reply {round, n, rank_1, mark_1, ...,
// rank_n, mark_n}. The thread starts with the first board and stops at MPI_Finalize (a delete
// callback on MPI_COMM_SELF runs first thing in it) or at StopAll().
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/comm/mpi/mpi_call.h"  // <mpi.h> without the C++ bindings
#include "runtime/status.h"

namespace sluice::mpi {

inline constexpr int kArrivalQueryTag = 1;
inline constexpr int kArrivalReplyTag = 2;
// Elements of a reply that carries `marks` marks.
constexpr int ArrivalReplyLength(int marks) { return 2 + 2 * marks; }

struct ArrivalSlot {
  int rank = 0;             // in the board's communicator
  int64_t* mark = nullptr;  // written by that rank with release stores, only read here
};

class ArrivalResponder {
 public:
  // Answers queries arriving on `query_comm` with `slots` until Remove(id) or MPI_Finalize; the
  // caller keeps both alive until then. Returns the registration's id. Local.
  static Result<int> Add(MPI_Comm query_comm, std::vector<ArrivalSlot> slots);
  // Stops answering for `id`: cancels its posted receive. Local.
  static void Remove(int id);
  // Joins the thread and cancels every posted receive; before MPI_Finalize.
  static void StopAll();
};

}  // namespace sluice::mpi
