// One Chrome-trace file for a whole job: every rank's events as its own Perfetto process (pid =
// rank, named "rank N"), gathered to rank 0 over the job's communicator and written there.
//
//   SLUICE_RETURN_IF_ERROR(GatherChromeTrace(world, TraceRecorder::Global(),
//                                            world.rank() == 0 ? "run/trace.json" : ""));
//
// Clocks: ranks on rank 0's host share its CLOCK_MONOTONIC, so their times are kept as they are.
// A rank on another host (told apart by host name) is shifted by the difference between its
// clock and rank 0's read right after a barrier, which lines the hosts up to within the barrier's
// skew (microseconds on a fast network); otherData.clock_offsets_ns records the shifts.
#pragma once

#include <string>

#include "runtime/comm.h"
#include "runtime/status.h"
#include "runtime/trace.h"

namespace sluice {

// Collective over `world`. Rank 0 writes the merged trace to `path` atomically (nothing when
// `path` is empty: the ranks still take part); the path of the other ranks is ignored. Errors
// name the file, or the transfer and the rank it was from.
Status GatherChromeTrace(Comm& world, const TraceRecorder& recorder, const std::string& path);

}  // namespace sluice
