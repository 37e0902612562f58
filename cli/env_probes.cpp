#include "cli/env_probes.h"

#include "offload/io_probe.h"

namespace sluice::cli {

Status ProbeIoUringSupport() { return offload::ProbeIoUring(); }

Status ProbeODirectSupport(const std::string& dir) { return offload::ProbeODirect(dir); }

}  // namespace sluice::cli
