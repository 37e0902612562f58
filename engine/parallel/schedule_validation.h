// Checks a pipeline schedule (pipeline_schedule.h) is one an executor can run: every stage
// forwards and backwards every micro-batch of each of its chunks exactly once, in an order the
// data allows, with every transfer a neighbour expects, and the whole pipeline cannot deadlock.
#pragma once

#include "engine/parallel/pipeline_schedule.h"
#include "runtime/status.h"

namespace sluice::parallel {

// OK, or InvalidArgument naming the stage, the instruction's index and what is wrong. The
// checks, on each stage:
//  - sizes at least 1, one instruction list per stage, micro-batches and chunks in range;
//  - each (micro-batch, chunk) forwarded once, then either backwarded once or split into one
//    backward-input and, after it, one backward-weight;
//  - the first virtual stage loads the micro-batch before its forward, the last one before its
//    forward too (targets);
//  - a receive before each forward and backward whose neighbouring virtual stage is on another
//    stage, a send after, exactly once each, and none toward a virtual stage that is not there;
//  - the step's reduce-tied-grads, reduce-grads and optimizer-step once each, in that order,
//    after all of the stage's compute;
// and over the pipeline, a dependency simulation (SimulateSchedule) runs every stage to its end:
// receives match their sends in order and nothing waits forever.
Status ValidateSchedule(const PipelineSchedule& schedule);

}  // namespace sluice::parallel
