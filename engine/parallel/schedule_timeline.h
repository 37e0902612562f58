// A pipeline schedule on a clock: when each stage runs each instruction, given what the work
// costs, honouring the data each one waits for from the other stages. This is the dependency
// simulation behind ValidateSchedule (a schedule that cannot finish deadlocks here) and the
// step-time estimate behind the bubble figures (parallelism-study.md §5.6-5.10).
//
// Model. Each stage runs its list in order, one instruction at a time. A compute instruction
// takes its cost; with v chunks per stage a chunk holds 1/v of the stage's layers and costs 1/v.
// A send takes no stage time (it is posted and left) and its data arrives p2p_latency after it
// is posted; a receive waits until its data has arrived. Loads and the step's reductions and
// optimizer step cost nothing here. Everything else a stage does between its instructions is
// idle time: the bubble.
#pragma once

#include <vector>

#include "engine/parallel/pipeline_schedule.h"
#include "runtime/status.h"

namespace sluice::parallel {

// Times in any one unit (e.g. milliseconds, or multiples of a forward).
struct PipelineCosts {
  double forward = 1.0;          // one micro-batch through all of a stage's layers
  double backward = 2.0;         // its whole backward (input and weight gradients)
  double backward_input = 1.0;   // the input-gradient part alone (zero-bubble B)
  double backward_weight = 1.0;  // the weight-gradient part alone (zero-bubble W)
  double p2p_latency = 0.0;      // from a send being posted to its data being at the receiver
};

struct TimedInstruction {
  PipeInstruction instruction;
  double start = 0;
  double end = 0;
};

struct StageTimeline {
  std::vector<TimedInstruction> instructions;  // the stage's list, in order, with times
  double busy = 0;                             // time spent computing
  double bubble_fraction = 0;                  // idle time / makespan
  // The most (micro-batch, chunk) pairs forwarded and not yet through their backward (the
  // backward-weight, for a split backward) at any moment: what the stage keeps activations for.
  // Counted in chunks: with v chunks, v of them are one micro-batch's worth of the stage.
  int peak_in_flight = 0;
};

struct ScheduleTimeline {
  int chunks = 1;
  double makespan = 0;         // when the last instruction of any stage ends
  double bubble_fraction = 0;  // idle time over all stages / (stages * makespan)
  std::vector<StageTimeline> stages;
};

// Runs `schedule` against `costs`. InvalidArgument for a negative or non-finite cost (naming
// it), for an instruction whose data cannot be there (a forward of a chunk whose input was never
// received or computed, a send of an output not yet computed, a receive that would take another
// transfer than the one the sender posted first on that stream), and for a deadlock, naming what
// each stuck stage waits for. It does not check that the schedule is complete: ValidateSchedule
// does, and calls this.
Result<ScheduleTimeline> SimulateSchedule(const PipelineSchedule& schedule,
                                          const PipelineCosts& costs);

}  // namespace sluice::parallel
