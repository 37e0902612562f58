// A pipeline step as it ran, in the simulator's terms (schedule_timeline.h): each stage's compute
// instructions with the times a clock saw them start and end on that stage, summed up as the
// simulator sums its own, so that a measured bubble and a simulated one are the same quantity.
// What benchmarks/bench_pipeline compares: real steps of the executor against SimulateSchedule
// fed with the costs measured on the same machine.
//
// Times are in any one unit on one clock shared by the stages (the node's steady clock: ranks of
// one machine). Only the compute matters here; sends, receives and loads take no stage time in
// the simulator either, and what a stage does between two computes is its bubble.
#pragma once

#include <vector>

#include "engine/parallel/pipeline_schedule.h"
#include "engine/parallel/schedule_timeline.h"
#include "runtime/status.h"

namespace sluice::parallel {

// The timeline of a measured step. `compute[r]` holds stage r's compute instructions (forward,
// backward, backward-input, backward-weight) in the order the stage ran them, each with its
// start and end; they must be exactly the compute instructions of schedule.stage_instructions[r]
// in that order (InvalidArgument naming the stage and the first that differs), with
// start <= end. Times are shifted so that the earliest start is 0. makespan: the latest end;
// a stage's busy time: the time during which at least one of its computes ran (intervals that
// overlap count once); bubble fractions as the simulator's (idle / makespan per stage, idle over
// all stages / (stages * makespan) overall). peak_in_flight is left 0: the model counts it.
Result<ScheduleTimeline> MeasuredTimeline(const PipelineSchedule& schedule,
                                          std::vector<std::vector<TimedInstruction>> compute);

// The transfer delays a timeline shows: for each compute whose input (activation or gradient)
// was made by a compute on another stage, and whose stage had finished its previous compute
// before that producer ended (it waited for the data, not for itself), the time from the
// producer's end to the consumer's start. On a simulated timeline each is the p2p latency; on a
// measured one, what a transfer really took (send, wire, receive and the wake-ups between).
// In the order of the stages and their lists.
std::vector<double> ExposedTransferDelays(const PipelineSchedule& schedule,
                                          const ScheduleTimeline& timeline);

}  // namespace sluice::parallel
