// Fault injection for the tests of what a job does when a rank stops or dies at an exact place
// (inside a checkpoint save, say), which no outside signal can hit reliably.
//
//   SLUICE_FAULT_POINT=<point>:<rank>:<hit>:<action>
//
// makes `rank` act the <hit>-th time (1-based) it passes FaultPoint(<point>, rank): action
// "stop" raises SIGSTOP (a stuck process: raised again after every SIGCONT, so that only SIGKILL
// ends it), "kill" raises SIGKILL (a dead one). Unset, a fault point costs a branch. A malformed value aborts the process naming the variable.
//
// Points: "checkpoint.rank_files_written" (a rank's shard files of a save are written, before
// the ranks agree that every rank wrote its files).
#pragma once

#include <string_view>

namespace sluice {

void FaultPoint(std::string_view point, int rank);

}  // namespace sluice
