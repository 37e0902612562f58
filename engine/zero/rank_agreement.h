// The check that every rank runs with the same settings and model before any ZeRO collective:
// ranks that disagree on the stage or a bucket size would issue different collectives and hang or
// corrupt each other, so they all stop at once with an error that names the setting, the values
// and the ranks instead.
#pragma once

#include <span>
#include <string_view>

#include "engine/zero/zero_options.h"
#include "runtime/comm.h"
#include "runtime/status.h"

namespace sluice::zero {

// Collective. OK when every rank passed the same values (same keys in the same order on every
// rank), else FailedPrecondition on every rank: "ranks disagree on zero_optimization.stage: 2 on
// ranks 0-1, 3 on rank 2; ...; start every rank with the same config". `what` says what is
// checked ("the ZeRO configuration").
Status CheckSameOnAllRanks(Comm& comm, std::span<const AgreedValue> values, std::string_view what);

}  // namespace sluice::zero
