// ArrivalBoard: who entered which collective, readable by any rank without the others' help.
//
// Each rank owns one slot in an MPI RMA window (passive target, one lock_all epoch for the
// window's lifetime) holding (seq << 8 | kind) of the last collective it entered. When a
// collective times out, the waiter reads every slot and names the ranks whose sequence number is
// behind. Each communicator has its own board.
//
// When all ranks share a node the window is MPI_Win_allocate_shared and slots (one cache line
// each) are written and read with plain atomics: a few nanoseconds per collective. Across nodes
// it is MPI_Win_allocate with MPI_Accumulate(MPI_REPLACE) + flush on the own slot and
// MPI_Fetch_and_op(MPI_NO_OP) reads, whose cost depends on the network's one-sided support.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm.h"
#include "runtime/comm/mpi/mpi_call.h"  // <mpi.h> without the C++ bindings
#include "runtime/status.h"

namespace sluice::mpi {

class ArrivalBoard {
 public:
  struct Mark {
    uint64_t seq = 0;  // last collective entered; 0 = none yet
    CommOpKind kind = CommOpKind::kBarrier;
  };

  // Collective over `comm`. If the MPI library cannot create the window the board is still
  // usable but knows nothing (ReadAll fails with the reason).
  static std::unique_ptr<ArrivalBoard> Create(MPI_Comm comm);
  ~ArrivalBoard();  // frees the window: collective, like MPI_Win_free
  ArrivalBoard(const ArrivalBoard&) = delete;
  ArrivalBoard& operator=(const ArrivalBoard&) = delete;

  void Enter(uint64_t seq, CommOpKind kind);
  Result<std::vector<Mark>> ReadAll();
  // Reads the board and names the ranks behind collective #seq: "ranks 3 did not arrive; rank 3
  // last entered barrier #16", with world ranks added for a sub-communicator.
  std::string DescribeLate(uint64_t seq);
  // Gives the window up without the collective free, for a communicator whose peers may never
  // come back (a free would wait for them).
  void Abandon();

  // Called before MPI_Finalize: closes the epochs of boards still alive (their owners leaked
  // or outlive MPI), so that finalisation sees no open epoch.
  static void CloseAllEpochs();

 private:
  ArrivalBoard(MPI_Comm comm, MPI_Win window, std::vector<int64_t*> shared_slots,
               std::string unavailable);
  void CloseEpoch();

  MPI_Comm comm_;
  MPI_Win window_;
  // Every rank's slot when the window is node-shared; empty for a remote-access window.
  std::vector<int64_t*> shared_slots_;
  int rank_ = 0;
  int size_ = 0;
  bool epoch_open_ = false;
  std::string unavailable_;  // why there is no window, if there is none
};

}  // namespace sluice::mpi
