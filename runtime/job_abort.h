// Ending a multi-rank job that cannot continue, so that no process is left behind.
//
// A collective that times out means a peer is dead, stopped or on another code path. Returning
// the error is not enough: the failing rank's own exit (MPI_Finalize, the communicators'
// destructors) waits for that peer, and a stopped peer never comes, so mpirun never returns. A
// rank command (sluice train) therefore asks for the abort policy:
//
//   EnableJobAbortOnCommTimeout();                // at start, for a world of several ranks
//   Status status = Train(...);
//   FinishRankCommand(status, world->timeout_seconds());  // aborts, or bounds the exit
//
// With the policy on, the first timeout (CommHandle reports it here) gives the rank
// kJobAbortGraceSeconds to carry the error up to FinishRankCommand, which prints it with its
// context and aborts the job at once; if the way up is stuck, the grace timer aborts it with
// the collective's error. Any other end of the command bounds what is left of the process
// (MPI_Finalize waits for every rank) to the communicator's timeout plus the grace. Aborting
// is MPI_Abort on an MPI world (mpirun then kills every rank, a stopped one included, and exits
// non-zero), _exit otherwise. Without the policy (tests, single-process tools) nothing changes:
// a timeout is only the error returned.
#pragma once

#include <string_view>

#include "runtime/status.h"

namespace sluice {

// Seconds a rank has, after its first collective timed out, to report the error before the job
// is aborted anyway; also the margin on the bounded exit.
inline constexpr double kJobAbortGraceSeconds = 10;

// How the job is aborted: installed by the comm backend that owns the world (MPI_Abort on
// MPI_COMM_WORLD). Must not return.
using JobAbortFunction = void (*)(int exit_code);
void SetJobAbortFunction(JobAbortFunction abort);

void EnableJobAbortOnCommTimeout();
// Called by CommHandle when an operation expires. With the policy on, the first call arms the
// grace timer.
void NoteCommTimeout(const Status& error);
// A collective timed out while the policy was on: the job is being aborted.
bool JobAbortPending();

// Prints "error: <status>" (rank-tagged by the caller's context), flushes, and aborts the job.
[[noreturn]] void AbortJob(const Status& error, int exit_code = 1);

// The end of a rank command: aborts the job when a collective timed out; otherwise the process
// has `comm_timeout_seconds` + kJobAbortGraceSeconds left to exit before the job is aborted.
// Returns `status` for the caller to report as usual.
Status FinishRankCommand(Status status, double comm_timeout_seconds);

}  // namespace sluice
