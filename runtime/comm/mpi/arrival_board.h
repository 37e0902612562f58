// ArrivalBoard: who entered which collective, readable when a collective times out, without the
// help of the ranks that are late.
//
// Each rank owns a slot holding (seq << 8 | kind) of the last collective it entered. The slots
// of one node's ranks live in an MPI shared-memory window (MPI_Win_allocate_shared over the
// node's ranks, one cache line each), written and read with plain atomics: a few nanoseconds per
// collective and no message. When a collective times out, the waiter reads its node's slots
// directly and asks every rank of another node through arrival_responder.h (a thread in each
// process answers for its node's ranks). A rank that does not answer within kQueryGraceSeconds
// is named as stopped, dead or unreachable: the read never waits longer, whatever the network.
// Each communicator has its own board.
//
// Passive-target one-sided reads (MPI_Win_allocate + MPI_Fetch_and_op) would need no thread, but
// over TCP they either are not offered or wait for the target to call into MPI, so a timeout
// report about a stopped rank on another host would hang (arrival_responder.h says more).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/comm.h"
#include "runtime/comm/mpi/mpi_call.h"  // <mpi.h> without the C++ bindings
#include "runtime/status.h"

namespace sluice::mpi {

// How long a read waits for the ranks of other nodes to answer.
inline constexpr double kQueryGraceSeconds = 2.0;

class ArrivalBoard {
 public:
  struct Mark {
    uint64_t seq = 0;  // last collective entered; 0 = none yet
    CommOpKind kind = CommOpKind::kBarrier;
    bool answered = true;  // false: a rank of another node that did not answer the query
  };

  // Collective over `comm`. If the MPI library cannot create the window the board is still
  // usable but knows less (ReadAll fails with the reason when it knows nothing of some rank).
  static std::unique_ptr<ArrivalBoard> Create(MPI_Comm comm);
  ~ArrivalBoard();  // frees the window and communicators: collective, like MPI_Win_free
  ArrivalBoard(const ArrivalBoard&) = delete;
  ArrivalBoard& operator=(const ArrivalBoard&) = delete;

  void Enter(uint64_t seq, CommOpKind kind);
  // Every rank's mark; takes up to kQueryGraceSeconds when the communicator spans nodes.
  Result<std::vector<Mark>> ReadAll();
  // Reads the board and names the ranks behind collective #seq: "ranks 3 did not arrive; rank 3
  // last entered barrier #16", with world ranks added for a sub-communicator, and the ranks that
  // did not answer.
  std::string DescribeLate(uint64_t seq);
  // Gives the board up without the collective frees, for a communicator whose peers may never
  // come back (a free would wait for them). This process still answers the others' queries.
  void Abandon();

  // Called before MPI_Finalize: closes the epochs of boards still alive (their owners leaked
  // or outlive MPI) and stops the responder thread, so that finalisation sees neither.
  static void PrepareForFinalize();

 private:
  explicit ArrivalBoard(MPI_Comm comm);
  Status AllocateNodeWindow();
  int CountReadable() const;
  // Duplicates comm_ for queries and answers them for the slots this process reads.
  Status StartAnswering();
  // Fills `marks` of the ranks not `known` by asking them; returns who answered.
  void Ask(std::vector<Mark>& marks, std::vector<bool>& known);
  void CloseEpoch();

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 0;
  MPI_Comm node_comm_ = MPI_COMM_NULL;  // this node's ranks of comm_
  MPI_Win window_ = MPI_WIN_NULL;       // their slots
  bool epoch_open_ = false;
  std::vector<int64_t*> slots_;  // by rank of comm_: null for ranks this process cannot read
  int64_t* own_ = nullptr;       // this rank's slot
  std::unique_ptr<int64_t> own_fallback_;  // the slot when there is no window
  MPI_Comm query_comm_ = MPI_COMM_NULL;    // a duplicate of comm_ for queries, if it spans nodes
  int responder_id_ = 0;
  std::mutex read_mutex_;  // one query round at a time: replies are matched by round
  int64_t round_ = 0;
  std::atomic<bool> abandoned_{false};
  std::string unavailable_;  // why some ranks cannot be read, if they cannot
};

}  // namespace sluice::mpi
