// A measured pipeline step summed up as the simulator sums its own (measured_timeline.h): fed the
// simulator's own compute times (as if a clock had seen them), MeasuredTimeline gives back the
// simulator's makespan, busy times and bubbles; overlapping intervals count once; a list that is
// not the schedule's is refused; and the exposed transfer delays of a simulated step are its p2p
// latency.
#include "engine/parallel/measured_timeline.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/check.h"

namespace sluice::parallel {
namespace {

PipelineSchedule Make(ScheduleKind kind, int p, int m, int v = 1) {
  Result<PipelineSchedule> s = MakePipelineSchedule(kind, p, m, v);
  SLUICE_CHECK(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

ScheduleTimeline Simulate(const PipelineSchedule& s, const PipelineCosts& costs) {
  Result<ScheduleTimeline> t = SimulateSchedule(s, costs);
  SLUICE_CHECK(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

// A timeline's compute instructions only, every time shifted by `offset`.
std::vector<std::vector<TimedInstruction>> ComputeOf(const ScheduleTimeline& t, double offset) {
  std::vector<std::vector<TimedInstruction>> out(t.stages.size());
  for (size_t r = 0; r < t.stages.size(); ++r) {
    for (TimedInstruction ti : t.stages[r].instructions) {
      if (!IsCompute(ti.instruction.op)) continue;
      ti.start += offset;
      ti.end += offset;
      out[r].push_back(ti);
    }
  }
  return out;
}

TEST(MeasuredTimeline, TheSimulatorsOwnTimesGiveItsBubbles) {
  const PipelineCosts costs{.forward = 1.5,
                            .backward = 3.0,
                            .backward_input = 1.75,
                            .backward_weight = 1.25,
                            .p2p_latency = 0.125};
  for (const PipelineSchedule& s :
       {Make(ScheduleKind::kGPipe, 2, 4), Make(ScheduleKind::kOneFOneB, 4, 8),
        Make(ScheduleKind::kInterleaved1F1B, 2, 4, 2), Make(ScheduleKind::kZeroBubbleH1, 4, 8)}) {
    SCOPED_TRACE(std::string(ScheduleKindName(s.kind)));
    const ScheduleTimeline simulated = Simulate(s, costs);
    // On another clock's origin: the earliest start becomes 0 (the simulator's first forward
    // starts at 0).
    Result<ScheduleTimeline> measured = MeasuredTimeline(s, ComputeOf(simulated, 1000.0));
    ASSERT_TRUE(measured.ok()) << measured.status().ToString();
    EXPECT_DOUBLE_EQ(measured->makespan, simulated.makespan);
    EXPECT_NEAR(measured->bubble_fraction, simulated.bubble_fraction, 1e-12);
    ASSERT_EQ(measured->stages.size(), simulated.stages.size());
    for (size_t r = 0; r < simulated.stages.size(); ++r) {
      EXPECT_NEAR(measured->stages[r].busy, simulated.stages[r].busy, 1e-9) << "stage " << r;
      EXPECT_NEAR(measured->stages[r].bubble_fraction, simulated.stages[r].bubble_fraction, 1e-12)
          << "stage " << r;
    }
    EXPECT_EQ(measured->stages[0].instructions.front().start, 0.0);
  }
}

TEST(MeasuredTimeline, OverlappingComputesCountOnce) {
  // P = 1, M = 2, 1F1B: F0 B0 F1 B1 on one stage. F1 overlaps B0 by 1 (two streams), and a gap
  // of 2 follows B0's end.
  const PipelineSchedule s = Make(ScheduleKind::kOneFOneB, 1, 2);
  std::vector<std::vector<TimedInstruction>> compute(1);
  compute[0] = {{{PipeOp::kForward, 0, 0}, 10, 11},
                {{PipeOp::kBackward, 0, 0}, 11, 14},
                {{PipeOp::kForward, 1, 0}, 13, 15},
                {{PipeOp::kBackward, 1, 0}, 17, 19}};
  Result<ScheduleTimeline> t = MeasuredTimeline(s, compute);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_DOUBLE_EQ(t->makespan, 9.0);
  EXPECT_DOUBLE_EQ(t->stages[0].busy, 7.0);  // [0, 5) and [7, 9)
  EXPECT_DOUBLE_EQ(t->bubble_fraction, 2.0 / 9.0);
}

TEST(MeasuredTimeline, RefusesAListThatIsNotTheSchedules) {
  const PipelineSchedule s = Make(ScheduleKind::kOneFOneB, 2, 2);
  std::vector<std::vector<TimedInstruction>> compute = ComputeOf(Simulate(s, PipelineCosts{}), 0.0);
  std::swap(compute[1][0], compute[1][1]);
  Result<ScheduleTimeline> swapped = MeasuredTimeline(s, compute);
  ASSERT_FALSE(swapped.ok());
  EXPECT_NE(swapped.status().message().find("stage 1: compute instruction 0"), std::string::npos)
      << swapped.status().ToString();

  compute = ComputeOf(Simulate(s, PipelineCosts{}), 0.0);
  compute[0].pop_back();
  Result<ScheduleTimeline> short_list = MeasuredTimeline(s, compute);
  ASSERT_FALSE(short_list.ok());
  EXPECT_NE(short_list.status().message().find("missing"), std::string::npos)
      << short_list.status().ToString();

  compute = ComputeOf(Simulate(s, PipelineCosts{}), 0.0);
  std::swap(compute[0][0].start, compute[0][0].end);
  EXPECT_FALSE(MeasuredTimeline(s, compute).ok());
  compute.pop_back();
  EXPECT_FALSE(MeasuredTimeline(s, compute).ok());
}

TEST(MeasuredTimeline, ExposedTransferDelaysAreTheLatency) {
  PipelineCosts costs;
  costs.p2p_latency = 0.25;
  for (const PipelineSchedule& s :
       {Make(ScheduleKind::kOneFOneB, 2, 4), Make(ScheduleKind::kInterleaved1F1B, 2, 4, 2)}) {
    SCOPED_TRACE(std::string(ScheduleKindName(s.kind)));
    const std::vector<double> delays = ExposedTransferDelays(s, Simulate(s, costs));
    ASSERT_FALSE(delays.empty());
    for (double d : delays) EXPECT_NEAR(d, 0.25, 1e-12);
  }
  // 1F1B, P = 2, M = 2, unit costs: stage 1 waits for F0's activation; its F1's is there before
  // stage 1 is done with B0 (not exposed); stage 0 waits for both gradients.
  const PipelineSchedule two = Make(ScheduleKind::kOneFOneB, 2, 2);
  EXPECT_EQ(ExposedTransferDelays(two, Simulate(two, costs)).size(), 3u);
}

}  // namespace
}  // namespace sluice::parallel
