#include "engine/parallel/measured_timeline.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

namespace sluice::parallel {
namespace {

// Busy time of a stage: the union of its intervals.
double UnionLength(std::vector<std::pair<double, double>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0;
  double open_start = 0;
  double open_end = -std::numeric_limits<double>::infinity();
  for (const auto& [start, end] : intervals) {
    if (start > open_end) {
      if (open_end > open_start) total += open_end - open_start;
      open_start = start;
      open_end = end;
    } else {
      open_end = std::max(open_end, end);
    }
  }
  if (open_end > open_start) total += open_end - open_start;
  return total;
}

}  // namespace

Result<ScheduleTimeline> MeasuredTimeline(const PipelineSchedule& schedule,
                                          std::vector<std::vector<TimedInstruction>> compute) {
  const std::string_view kind = ScheduleKindName(schedule.kind);
  if (static_cast<int>(compute.size()) != schedule.stages ||
      static_cast<int>(schedule.stage_instructions.size()) != schedule.stages) {
    return InvalidArgumentError("measured {} timeline: {} stages measured, the schedule has {}",
                                kind, compute.size(), schedule.stages);
  }
  double origin = std::numeric_limits<double>::infinity();
  for (int r = 0; r < schedule.stages; ++r) {
    std::vector<PipeInstruction> expected;
    for (const PipeInstruction& in : schedule.stage_instructions[r]) {
      if (IsCompute(in.op)) expected.push_back(in);
    }
    const std::vector<TimedInstruction>& measured = compute[r];
    for (size_t i = 0; i < std::max(expected.size(), measured.size()); ++i) {
      if (i >= measured.size() || i >= expected.size() ||
          !(measured[i].instruction == expected[i])) {
        return InvalidArgumentError(
            "measured {} timeline, stage {}: compute instruction {} is {}, the schedule's is {}; "
            "give each stage's computes in the order it ran them",
            kind, r, i, i < measured.size() ? measured[i].instruction.Describe() : "missing",
            i < expected.size() ? expected[i].Describe() : "none (the schedule has fewer)");
      }
      if (!(measured[i].start <= measured[i].end)) {
        return InvalidArgumentError(
            "measured {} timeline, stage {}: {} ends ({}) before it starts ({})", kind, r,
            measured[i].instruction.Describe(), measured[i].end, measured[i].start);
      }
      origin = std::min(origin, measured[i].start);
    }
  }
  ScheduleTimeline timeline;
  timeline.chunks = schedule.chunks;
  timeline.stages.resize(schedule.stages);
  double busy_total = 0;
  for (int r = 0; r < schedule.stages; ++r) {
    StageTimeline& stage = timeline.stages[r];
    stage.instructions = std::move(compute[r]);
    std::vector<std::pair<double, double>> intervals;
    for (TimedInstruction& t : stage.instructions) {
      t.start -= origin;
      t.end -= origin;
      intervals.emplace_back(t.start, t.end);
      timeline.makespan = std::max(timeline.makespan, t.end);
    }
    stage.busy = UnionLength(std::move(intervals));
    busy_total += stage.busy;
  }
  for (StageTimeline& stage : timeline.stages) {
    stage.bubble_fraction = timeline.makespan > 0 ? 1.0 - stage.busy / timeline.makespan : 0.0;
  }
  timeline.bubble_fraction =
      timeline.makespan > 0 ? 1.0 - busy_total / (timeline.makespan * schedule.stages) : 0.0;
  return timeline;
}

std::vector<double> ExposedTransferDelays(const PipelineSchedule& schedule,
                                          const ScheduleTimeline& timeline) {
  // (stage, input backward?, micro-batch, chunk) -> end of that compute.
  std::map<std::tuple<int, bool, int, int>, double> ends;
  for (int r = 0; r < static_cast<int>(timeline.stages.size()); ++r) {
    for (const TimedInstruction& t : timeline.stages[r].instructions) {
      const PipeOp op = t.instruction.op;
      if (op == PipeOp::kForward || IsInputBackward(op)) {
        ends[{r, IsInputBackward(op), t.instruction.micro, t.instruction.chunk}] = t.end;
      }
    }
  }
  const int last = schedule.virtual_stages() - 1;
  std::vector<double> delays;
  for (int r = 0; r < static_cast<int>(timeline.stages.size()); ++r) {
    double previous_end = -std::numeric_limits<double>::infinity();
    for (const TimedInstruction& t : timeline.stages[r].instructions) {
      const PipeInstruction& in = t.instruction;
      if (!IsCompute(in.op)) continue;
      const bool backward = IsInputBackward(in.op);
      const int k = schedule.VirtualStage(r, in.chunk);
      const int from = in.op == PipeOp::kForward ? k - 1 : k + 1;
      const bool remote = (in.op == PipeOp::kForward || backward) && from >= 0 && from <= last &&
                          schedule.StageOf(from) != r;
      if (remote) {
        const auto producer =
            ends.find({schedule.StageOf(from), backward, in.micro, schedule.ChunkOf(from)});
        if (producer != ends.end() && producer->second > previous_end) {
          delays.push_back(t.start - producer->second);
        }
      }
      previous_end = t.end;
    }
  }
  return delays;
}

}  // namespace sluice::parallel
