// SaveCheckpoint's coordination over a host communicator (the MPI backend): the `agree`
// callback as one all-reduce, and a staging tag every rank shares.
#pragma once

#include <string>

#include "engine/checkpoint/checkpoint_writer.h"
#include "runtime/comm.h"

namespace sluice::checkpoint {

// `agree` as an all-reduce (sum) of one fp32 "failed" flag over `comm`, which must work on host
// memory (MPI) and outlive the returned function.
AgreeFn CommAgreeFn(Comm& comm);

// A fresh random attempt tag, drawn on rank 0 and broadcast: the same on every rank. Collective.
Result<std::string> AgreeOnAttemptTag(Comm& comm);

}  // namespace sluice::checkpoint
