// Hostfiles in DeepSpeed's format, for `sluice launch --hostfile FILE`:
//
//   # comment                  (a # starts a comment anywhere on a line)
//   worker-1 slots=4
//   worker-2 slots=4           (blank lines are skipped)
//
// and DeepSpeed's --include / --exclude filters: hosts joined by '@', each optionally with the
// slots to take or drop after a ':' ("worker-1@worker-2:0,2"). Open MPI reads the same
// `host slots=N` lines, so the result maps onto `mpirun --host worker-1:4,worker-2:2`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace sluice::cli {

struct HostSlots {
  std::string host;
  // The slot indices in use, ascending (0..slots-1 as the file gives them; fewer after a filter).
  // Ranks are placed by count: on a CPU the slots of a host are interchangeable.
  std::vector<int> slots;
  int line = 0;  // where the file names the host
};

// Parses hostfile text; `file` names it in errors ("FILE:LINE: what is wrong and what to write").
// InvalidArgument for a line that is not `host slots=N` (N a positive integer), a host named
// twice, or a file with no host at all.
Result<std::vector<HostSlots>> ParseHostfile(std::string_view text, std::string_view file);

// Reads and parses `path`; NotFound / IoError naming it.
Result<std::vector<HostSlots>> LoadHostfile(const std::string& path);

// Applies DeepSpeed's --include or --exclude (at most one non-empty): include keeps the named
// hosts (the listed slots only, when given), exclude drops the named slots or whole hosts.
// InvalidArgument naming the filter for both given, a host not in the hostfile, a slot the host
// does not have, malformed text, or a filter that leaves no slot.
Result<std::vector<HostSlots>> FilterHosts(const std::vector<HostSlots>& hosts,
                                           std::string_view include, std::string_view exclude);

int TotalSlots(const std::vector<HostSlots>& hosts);

}  // namespace sluice::cli
