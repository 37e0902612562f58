// A simulated pipeline step as text: one row per stage, one column per time slot, each compute
// instruction written where it starts (F3, B3, W3; F3.1 for chunk 1 of an interleaved schedule)
// and held blank for the rest of its time, idle slots as '.'. For estimates and dry runs:
//
//   pipeline step: makespan 33, bubble 27.3% (1 slot = 1)
//   stage 0  F0 F1 F2 F3 .  .  .  B0    F4 B1    ...  bubble 27.3%
#pragma once

#include <string>

#include "engine/parallel/schedule_timeline.h"

namespace sluice::parallel {

// `slot` is the time one column stands for; 0 picks the shortest compute instruction's time.
// Times that are not multiples of it are rounded to the nearest slot. CHECKs slot >= 0.
std::string RenderTimeline(const ScheduleTimeline& timeline, double slot = 0);

}  // namespace sluice::parallel
