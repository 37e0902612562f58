// Capability probes for `sluice env` and for choosing I/O paths: can this process use io_uring,
// and does a directory's filesystem accept O_DIRECT?
#pragma once

#include <string>

#include "runtime/status.h"

namespace sluice::offload {

// OK when a ring can be created and a no-op round-trips through it; otherwise Unavailable with
// the reason (kernel too old, io_uring disabled by sysctl, blocked by seccomp).
Status ProbeIoUring();

// OK when a file in `dir` can be opened with O_DIRECT and an aligned 4 KiB block written and
// read back; Unavailable when the filesystem refuses O_DIRECT (tmpfs before Linux 6.6, ramfs);
// NotFound / IoError when the directory is missing or not writable. Leaves no file behind.
Status ProbeODirect(const std::string& dir);

}  // namespace sluice::offload
