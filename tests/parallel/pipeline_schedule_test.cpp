// Pipeline schedules as data: the generators' orders against Megatron's, DeepSpeed's and
// PyTorch's (parallelism-study.md §5.4-5.9), the validator against broken schedules, and the
// timeline simulator's bubbles and in-flight counts against the closed forms.
#include "engine/parallel/pipeline_schedule.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/parallel/schedule_chart.h"
#include "engine/parallel/schedule_timeline.h"
#include "engine/parallel/schedule_validation.h"

namespace sluice::parallel {
namespace {

constexpr ScheduleKind kAllKinds[] = {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB,
                                      ScheduleKind::kInterleaved1F1B, ScheduleKind::kZeroBubbleH1};

PipelineSchedule Make(ScheduleKind kind, int stages, int micro_batches, int chunks = 1) {
  Result<PipelineSchedule> schedule = MakePipelineSchedule(kind, stages, micro_batches, chunks);
  EXPECT_TRUE(schedule.ok()) << schedule.status().ToString();
  return schedule.ok() ? *std::move(schedule) : PipelineSchedule{};
}

// The F = 1, B = 2 costs of the study, with B split 1 + 1 for the zero-bubble schedule.
PipelineCosts UnitCosts() {
  return {.forward = 1, .backward = 2, .backward_input = 1, .backward_weight = 1};
}

ScheduleTimeline Simulate(const PipelineSchedule& schedule, const PipelineCosts& costs) {
  Result<ScheduleTimeline> timeline = SimulateSchedule(schedule, costs);
  EXPECT_TRUE(timeline.ok()) << timeline.status().ToString();
  return timeline.ok() ? *std::move(timeline) : ScheduleTimeline{};
}

// A stage's instructions as labels, compute only or all of them.
std::string Order(const PipelineSchedule& schedule, int stage, bool compute_only) {
  std::string out;
  for (const PipeInstruction& in : schedule.stage_instructions[stage]) {
    if (compute_only && !IsCompute(in.op)) continue;
    if (!out.empty()) out += ' ';
    out += in.Label(schedule.chunks > 1);
  }
  return out;
}

std::string Prefix(const std::string& s, size_t tokens) {
  size_t end = 0;
  for (size_t i = 0; i < tokens; ++i) {
    end = s.find(' ', end + (i > 0 ? 1 : 0));
    if (end == std::string::npos) return s;
  }
  return s.substr(0, end);
}

// The closed forms (parallelism-study.md §5.6-5.10) as fractions of the step: bubble time over
// bubble time plus the stage's M micro-batches of work.
double TheoryBubble(ScheduleKind kind, int p, int m, int v, const PipelineCosts& c) {
  const double work = m * (c.forward + c.backward);
  switch (kind) {
    case ScheduleKind::kGPipe:
    case ScheduleKind::kOneFOneB:
      return (p - 1) * (c.forward + c.backward) / (work + (p - 1) * (c.forward + c.backward));
    case ScheduleKind::kInterleaved1F1B: {
      const double bubble = (p - 1) * (c.forward + c.backward) / v;
      return bubble / (work + bubble);
    }
    case ScheduleKind::kZeroBubbleH1: {
      const double split_work = m * (c.forward + c.backward_input + c.backward_weight);
      const double bubble = (p - 1) * (c.forward + c.backward_input - c.backward_weight);
      return bubble / (split_work + bubble);
    }
  }
  return -1;
}

void ExpectInvalid(const Result<PipelineSchedule>& r, const std::string& needle) {
  ASSERT_FALSE(r.ok()) << "expected an error naming " << needle;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
}

void ExpectRefused(const PipelineSchedule& schedule, const std::string& needle) {
  const Status status = ValidateSchedule(schedule);
  ASSERT_FALSE(status.ok()) << "expected a refusal mentioning '" << needle << "'";
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(needle), std::string::npos) << status.ToString();
}

// Index of `label` in a stage's list.
size_t IndexOf(const PipelineSchedule& schedule, int stage, const std::string& label) {
  const auto& list = schedule.stage_instructions[stage];
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].Label(schedule.chunks > 1) == label) return i;
  }
  ADD_FAILURE() << label << " not on stage " << stage;
  return 0;
}

TEST(PipelineSchedule, EveryScheduleIsWellFormed) {
  for (ScheduleKind kind : kAllKinds) {
    for (int p : {1, 2, 4}) {
      for (int m : {4, 8}) {
        const int v = kind == ScheduleKind::kInterleaved1F1B ? 2 : 1;
        SCOPED_TRACE(fmt::format("{} P={} M={} v={}", ScheduleKindName(kind), p, m, v));
        const PipelineSchedule schedule = Make(kind, p, m, v);
        ASSERT_EQ(schedule.stage_instructions.size(), static_cast<size_t>(p));
        const Status status = ValidateSchedule(schedule);
        EXPECT_TRUE(status.ok()) << status.ToString();
        for (int r = 0; r < p; ++r) {
          const auto& list = schedule.stage_instructions[r];
          const auto count = [&](PipeOp op) {
            return std::count_if(list.begin(), list.end(),
                                 [&](const PipeInstruction& in) { return in.op == op; });
          };
          EXPECT_EQ(count(PipeOp::kForward), m * v);
          const bool split = kind == ScheduleKind::kZeroBubbleH1;
          EXPECT_EQ(count(PipeOp::kBackward), split ? 0 : m * v);
          EXPECT_EQ(count(PipeOp::kBackwardInput), split ? m : 0);
          EXPECT_EQ(count(PipeOp::kBackwardWeight), split ? m : 0);
          EXPECT_EQ(list.back().op, PipeOp::kOptimizerStep);
        }
      }
    }
  }
  // Odd corners: fewer micro-batches than stages, every forward in the warm-up (M = P), 3 chunks.
  for (ScheduleKind kind :
       {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB, ScheduleKind::kZeroBubbleH1}) {
    EXPECT_TRUE(ValidateSchedule(Make(kind, 4, 2)).ok()) << ScheduleKindName(kind);
    EXPECT_TRUE(ValidateSchedule(Make(kind, 3, 7)).ok()) << ScheduleKindName(kind);
  }
  EXPECT_TRUE(ValidateSchedule(Make(ScheduleKind::kInterleaved1F1B, 4, 4, 2)).ok());
  EXPECT_TRUE(ValidateSchedule(Make(ScheduleKind::kInterleaved1F1B, 2, 6, 3)).ok());
}

// Megatron's forward_backward_pipelining_without_interleaving for P = 4, M = 8: stage 0 warms
// up with P - 1 = 3 forwards, the last stage with none.
TEST(PipelineSchedule, OneFOneBMatchesMegatronsOrder) {
  const PipelineSchedule s = Make(ScheduleKind::kOneFOneB, 4, 8);
  EXPECT_EQ(Order(s, 0, true), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(Order(s, 1, true), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(Order(s, 3, true), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  // Lowered: stage 0 loads inputs, sends activations, receives gradients; the last stage loads
  // targets, receives activations, sends gradients.
  EXPECT_EQ(Order(s, 0, false),
            "L0 F0 SA0 L1 F1 SA1 L2 F2 SA2 L3 F3 SA3 RG0 B0 L4 F4 SA4 RG1 B1 L5 F5 SA5 RG2 B2 "
            "L6 F6 SA6 RG3 B3 L7 F7 SA7 RG4 B4 RG5 B5 RG6 B6 RG7 B7 TIED REDUCE STEP");
  EXPECT_EQ(Order(s, 3, false),
            "L0 RA0 F0 B0 SG0 L1 RA1 F1 B1 SG1 L2 RA2 F2 B2 SG2 L3 RA3 F3 B3 SG3 L4 RA4 F4 B4 SG4 "
            "L5 RA5 F5 B5 SG5 L6 RA6 F6 B6 SG6 L7 RA7 F7 B7 SG7 TIED REDUCE STEP");
  EXPECT_EQ(Order(s, 1, false).substr(0, 30), "RA0 F0 SA0 RA1 F1 SA1 RA2 F2 S");
}

// DeepSpeed's TrainSchedule for P = 4, M = 6 (study §5.4): the same compute order per stage.
TEST(PipelineSchedule, OneFOneBMatchesDeepSpeedsTrainSchedule) {
  const PipelineSchedule s = Make(ScheduleKind::kOneFOneB, 4, 6);
  EXPECT_EQ(Order(s, 0, true), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(Order(s, 1, true), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  EXPECT_EQ(Order(s, 2, true), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(Order(s, 3, true), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
}

// Megatron's interleaved table for P = 4, v = 2, M = 8 (study §5.8, where virtual stage
// c * 4 + r is printed before the op: 4F0 is chunk 1's forward of micro-batch 0).
TEST(PipelineSchedule, InterleavedMatchesMegatronsTable) {
  const PipelineSchedule s = Make(ScheduleKind::kInterleaved1F1B, 4, 8, 2);
  EXPECT_EQ(Prefix(Order(s, 0, true), 25),
            "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 "
            "F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 B2.0 B3.0 B4.1");
  EXPECT_EQ(Prefix(Order(s, 3, true), 22),
            "F0.0 F1.0 F2.0 F3.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 "
            "F6.0 B2.0 F7.0 B3.0 F4.1 B4.1");
  // The wrap from stage 3's chunk 0 to stage 0's chunk 1 is a transfer 3 -> 0.
  EXPECT_LT(IndexOf(s, 0, "RA0.1"), IndexOf(s, 0, "F0.1"));
  EXPECT_LT(IndexOf(s, 3, "F0.0"), IndexOf(s, 3, "SA0.0"));
}

// PyTorch's ZB1P order for P = 4, M = 8 (study §5.9; its I is our B).
TEST(PipelineSchedule, ZeroBubbleH1MatchesPyTorchsOrder) {
  const PipelineSchedule s = Make(ScheduleKind::kZeroBubbleH1, 4, 8);
  EXPECT_EQ(Order(s, 0, true),
            "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7");
  EXPECT_EQ(Order(s, 1, true),
            "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7");
  EXPECT_EQ(Order(s, 2, true),
            "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7");
  EXPECT_EQ(Order(s, 3, true),
            "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7");
  EXPECT_EQ(s.stage_instructions[3][3].op, PipeOp::kBackwardInput);
}

TEST(PipelineSchedule, RefusesBadArgumentsNamingThem) {
  ExpectInvalid(MakeOneFOneBSchedule(0, 8), "stages");
  ExpectInvalid(MakeGPipeSchedule(4, 0), "micro_batches");
  ExpectInvalid(MakeZeroBubbleH1Schedule(-1, 8), "stages");
  ExpectInvalid(MakeInterleavedSchedule(4, 8, 0), "chunks");
  ExpectInvalid(MakeInterleavedSchedule(4, 8, 1), "chunks");
  ExpectInvalid(MakeInterleavedSchedule(4, 6, 2),
                "multiple of stages (pipeline.stages) = 4; use 4 or 8");
  ExpectInvalid(MakeInterleavedSchedule(4, 2, 2), "use 4 micro-batches");
  ExpectInvalid(MakePipelineSchedule(ScheduleKind::kOneFOneB, 4, 8, 2), "chunks");
  ExpectInvalid(MakePipelineSchedule(ScheduleKind::kZeroBubbleH1, 4, 8, 0), "chunks");
  ExpectInvalid(MakePipelineSchedule(ScheduleKind::kGPipe, 2, -3, 1), "micro_batches");
}

TEST(ScheduleValidation, RefusesBrokenSchedules) {
  const PipelineSchedule good = Make(ScheduleKind::kOneFOneB, 2, 4);
  ASSERT_TRUE(ValidateSchedule(good).ok());
  {  // A backward dropped, with the send of its gradient.
    PipelineSchedule s = good;
    auto& list = s.stage_instructions[1];
    list.erase(list.begin() + IndexOf(s, 1, "B2"), list.begin() + IndexOf(s, 1, "SG2") + 1);
    ExpectRefused(s, "micro-batch 2, chunk 0 has no backward");
  }
  {  // A forward twice.
    PipelineSchedule s = good;
    auto& list = s.stage_instructions[0];
    list.insert(list.begin() + IndexOf(s, 0, "B0"), list[IndexOf(s, 0, "F1")]);
    ExpectRefused(s, "already done");
  }
  {  // A backward before its forward (stage 1's F3 and B3 swapped).
    PipelineSchedule s = good;
    std::swap(s.stage_instructions[1][IndexOf(s, 1, "F3")],
              s.stage_instructions[1][IndexOf(s, 1, "B3")]);
    ExpectRefused(s, "before its forward");
  }
  {  // A send toward a stage that is not there.
    PipelineSchedule s = good;
    s.stage_instructions[1].insert(s.stage_instructions[1].begin() + IndexOf(s, 1, "B0"),
                                   {.op = PipeOp::kSendActivation, .micro = 0, .chunk = 0});
    ExpectRefused(s, "no other stage receives");
  }
  {  // The optimizer step before the reductions.
    PipelineSchedule s = good;
    auto& list = s.stage_instructions[0];
    std::swap(list[list.size() - 1], list[list.size() - 2]);
    ExpectRefused(s, "reduce-tied-grads, reduce-grads, optimizer-step");
  }
  {  // Stage 1 takes micro-batches 0 and 1 in the other order than stage 0 sent them: each
     // stage's own order is sound, the transfers are not.
    PipelineSchedule s = Make(ScheduleKind::kGPipe, 2, 4);
    auto& list = s.stage_instructions[1];
    std::swap_ranges(list.begin() + IndexOf(s, 1, "L0"), list.begin() + IndexOf(s, 1, "L1"),
                     list.begin() + IndexOf(s, 1, "L1"));
    ASSERT_EQ(Order(s, 1, true).substr(0, 8), "F1 F0 F2");
    ExpectRefused(s, "in the order they were sent");
  }
  {  // Stage 0 waits for micro-batch 0's gradient before sending its activation: deadlock.
    PipelineSchedule s = good;
    auto& list = s.stage_instructions[0];
    const std::vector<PipeInstruction> backward(list.begin() + IndexOf(s, 0, "RG0"),
                                                list.begin() + IndexOf(s, 0, "B0") + 1);
    ASSERT_EQ(backward.size(), 2u);
    list.erase(list.begin() + IndexOf(s, 0, "RG0"), list.begin() + IndexOf(s, 0, "B0") + 1);
    list.insert(list.begin() + IndexOf(s, 0, "SA0"), backward.begin(), backward.end());
    ASSERT_EQ(Order(s, 0, false).substr(0, 14), "L0 F0 RG0 B0 S");
    ExpectRefused(s, "deadlocks");
    ExpectRefused(s, "stage 0 waits at instruction");
    ExpectRefused(s, "stage 1 waits at instruction");
  }
  {  // Zero bubble: a weight gradient before its input gradient.
    PipelineSchedule s = Make(ScheduleKind::kZeroBubbleH1, 2, 4);
    ASSERT_TRUE(ValidateSchedule(s).ok());
    std::swap(s.stage_instructions[0][IndexOf(s, 0, "B0")],
              s.stage_instructions[0][IndexOf(s, 0, "W0")]);
    ExpectRefused(s, "not after a backward-input");
  }
  {  // Zero bubble: a weight gradient never run.
    PipelineSchedule s = Make(ScheduleKind::kZeroBubbleH1, 2, 4);
    auto& list = s.stage_instructions[1];
    list.erase(list.begin() + IndexOf(s, 1, "W3"));
    ExpectRefused(s, "has no backward-weight");
  }
  {  // One stage, two chunks: chunk 1's forward before chunk 0's (a local hand-off).
    PipelineSchedule s = Make(ScheduleKind::kInterleaved1F1B, 1, 4, 2);
    ASSERT_TRUE(ValidateSchedule(s).ok());
    std::swap(s.stage_instructions[0][IndexOf(s, 0, "F0.0")],
              s.stage_instructions[0][IndexOf(s, 0, "F0.1")]);
    EXPECT_FALSE(ValidateSchedule(s).ok());
  }
}

// With F = 1, B = 2 every 1F1B and GPipe stage idles (P - 1)(F + B): a bubble of
// (P - 1) / (M + P - 1) of the step.
TEST(ScheduleTimeline, OneFOneBAndGPipeBubblesMatchTheClosedForm) {
  for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kGPipe}) {
    for (int p : {2, 4, 8}) {
      for (int m : {4, 8, 16}) {
        SCOPED_TRACE(fmt::format("{} P={} M={}", ScheduleKindName(kind), p, m));
        const ScheduleTimeline t = Simulate(Make(kind, p, m), UnitCosts());
        const double theory = TheoryBubble(kind, p, m, 1, UnitCosts());
        EXPECT_NEAR(t.bubble_fraction, theory, 0.1 * theory);
        EXPECT_NEAR(t.makespan, (m + p - 1) * 3.0, 1e-9);
        for (const StageTimeline& st : t.stages) EXPECT_NEAR(st.busy, 3.0 * m, 1e-9);
      }
    }
  }
  // One stage: no bubble.
  EXPECT_EQ(Simulate(Make(ScheduleKind::kOneFOneB, 1, 8), UnitCosts()).bubble_fraction, 0.0);
}

// Interleaving v = 2 chunks (each half a stage's layers) shrinks the bubble time by v:
// (P - 1) / (v M + P - 1) of the step, about half of 1F1B's.
TEST(ScheduleTimeline, InterleavingRoughlyHalvesTheBubble) {
  for (int p : {2, 4, 8}) {
    for (int m : {8, 16}) {
      SCOPED_TRACE(fmt::format("P={} M={}", p, m));
      const double one = Simulate(Make(ScheduleKind::kOneFOneB, p, m), UnitCosts()).bubble_fraction;
      const ScheduleTimeline inter =
          Simulate(Make(ScheduleKind::kInterleaved1F1B, p, m, 2), UnitCosts());
      const double theory = TheoryBubble(ScheduleKind::kInterleaved1F1B, p, m, 2, UnitCosts());
      EXPECT_NEAR(inter.bubble_fraction, theory, 0.1 * theory);
      const double ratio = inter.bubble_fraction / one;
      std::printf("interleaved v=2 / 1F1B bubble, P=%d M=%d: %.4f / %.4f = %.3f\n", p, m,
                  inter.bubble_fraction, one, ratio);
      // (M + P - 1) / (2 M + P - 1): above a half, toward it as M grows.
      EXPECT_GT(ratio, 0.5);
      EXPECT_LT(ratio, 2.0 / 3);
      for (const StageTimeline& st : inter.stages) EXPECT_NEAR(st.busy, 3.0 * m, 1e-9);
    }
  }
  // The study's simulation: P = 4, M = 8 takes 28.5 against 1F1B's 33.
  EXPECT_NEAR(Simulate(Make(ScheduleKind::kInterleaved1F1B, 4, 8, 2), UnitCosts()).makespan, 28.5,
              1e-9);
}

// ZB-H1 with F = B = W = 1 against 1F1B with F = 1, B = 2 (the same work): at most half the
// bubble; (P - 1)(F + B - W) of bubble time.
TEST(ScheduleTimeline, ZeroBubbleH1AtMostHalvesOneFOneBsBubble) {
  for (int p : {2, 4, 8}) {
    for (int m : {8, 16}) {
      SCOPED_TRACE(fmt::format("P={} M={}", p, m));
      const double one = Simulate(Make(ScheduleKind::kOneFOneB, p, m), UnitCosts()).bubble_fraction;
      const ScheduleTimeline zb = Simulate(Make(ScheduleKind::kZeroBubbleH1, p, m), UnitCosts());
      EXPECT_LE(zb.bubble_fraction, 0.5 * one);
      const double theory = TheoryBubble(ScheduleKind::kZeroBubbleH1, p, m, 1, UnitCosts());
      EXPECT_NEAR(zb.bubble_fraction, theory, 0.1 * theory);
      std::printf("zb-h1 / 1F1B bubble, P=%d M=%d: %.4f / %.4f = %.3f\n", p, m, zb.bubble_fraction,
                  one, zb.bubble_fraction / one);
    }
  }
  EXPECT_NEAR(Simulate(Make(ScheduleKind::kZeroBubbleH1, 4, 8), UnitCosts()).makespan, 27, 1e-9);
}

TEST(ScheduleTimeline, PeakInFlightMicroBatches) {
  for (int p : {1, 2, 4}) {
    for (int m : {2, 4, 8}) {
      SCOPED_TRACE(fmt::format("P={} M={}", p, m));
      const ScheduleTimeline gpipe = Simulate(Make(ScheduleKind::kGPipe, p, m), UnitCosts());
      const ScheduleTimeline one = Simulate(Make(ScheduleKind::kOneFOneB, p, m), UnitCosts());
      const ScheduleTimeline zb = Simulate(Make(ScheduleKind::kZeroBubbleH1, p, m), UnitCosts());
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(gpipe.stages[r].peak_in_flight, m) << "stage " << r;
        // Megatron's 1F1B keeps min(P - r, M) in flight on stage r.
        EXPECT_EQ(one.stages[r].peak_in_flight, std::min(p - r, m)) << "stage " << r;
        EXPECT_LE(zb.stages[r].peak_in_flight, p) << "stage " << r;
      }
      EXPECT_EQ(one.stages[0].peak_in_flight, std::min(p, m));
    }
  }
}

// With a transfer latency L, GPipe's step is (M + P - 1)(F + B) plus 2 (P - 1) L: one latency
// per hop each way.
TEST(ScheduleTimeline, TransferLatencyDelaysTheReceiver) {
  PipelineCosts costs = UnitCosts();
  costs.p2p_latency = 0.25;
  for (int p : {2, 4}) {
    const ScheduleTimeline t = Simulate(Make(ScheduleKind::kGPipe, p, 8), costs);
    EXPECT_NEAR(t.makespan, (8 + p - 1) * 3.0 + 2 * (p - 1) * 0.25, 1e-9) << "P=" << p;
    // Stage 1's first forward starts when stage 0's activation arrives.
    const auto& s1 = t.stages[1].instructions;
    const auto f0 = std::find_if(s1.begin(), s1.end(), [](const TimedInstruction& ti) {
      return ti.instruction.op == PipeOp::kForward;
    });
    ASSERT_NE(f0, s1.end());
    EXPECT_NEAR(f0->start, 1.25, 1e-9);
  }
  costs.forward = -1;
  const Result<ScheduleTimeline> bad = SimulateSchedule(Make(ScheduleKind::kGPipe, 2, 2), costs);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("forward"), std::string::npos);
}

TEST(ScheduleChart, DrawsOneRowPerStageInTimeSlots) {
  // P = 2, M = 2: stage 0 F0 [0,1) F1 [1,2) waits, B0 [4,6), waits, B1 [7,9); stage 1 F0 [1,2)
  // B0 [2,4) F1 [4,5) B1 [5,7).
  const ScheduleTimeline t = Simulate(Make(ScheduleKind::kOneFOneB, 2, 2), UnitCosts());
  EXPECT_EQ(RenderTimeline(t),
            "pipeline step: makespan 9, bubble 33.3% (1 slot = 1)\n"
            "stage 0   F0 F1 .  .  B0    .  B1     bubble 33.3%\n"
            "stage 1   .  F0 B0    F1 B1    .  .   bubble 33.3%\n");
  // Interleaved cells name the chunk; half-cost chunks make half-unit slots.
  const std::string inter =
      RenderTimeline(Simulate(Make(ScheduleKind::kInterleaved1F1B, 2, 2, 2), UnitCosts()));
  EXPECT_NE(inter.find("(1 slot = 0.5)"), std::string::npos) << inter;
  EXPECT_NE(inter.find("F0.1"), std::string::npos) << inter;
  std::printf(
      "%s\n%s",
      RenderTimeline(Simulate(Make(ScheduleKind::kZeroBubbleH1, 4, 8), UnitCosts())).c_str(),
      inter.c_str());
}

// The bubble table of benchmarks/results/pipeline_bubbles_*.md: every schedule's simulated
// bubble against its closed form, F = 1, B = 2 (B = W = 1 split).
TEST(ScheduleTimeline, BubbleTable) {
  std::printf(
      "| schedule | P | M | v | makespan | bubble | theory | peak in flight (stage 0) |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (int p : {2, 4, 8}) {
    for (int m : {8, 16, 32}) {
      struct Row {
        ScheduleKind kind;
        int v;
      };
      for (Row row :
           {Row{ScheduleKind::kGPipe, 1}, Row{ScheduleKind::kOneFOneB, 1},
            Row{ScheduleKind::kInterleaved1F1B, 2}, Row{ScheduleKind::kInterleaved1F1B, 4},
            Row{ScheduleKind::kZeroBubbleH1, 1}}) {
        const ScheduleTimeline t = Simulate(Make(row.kind, p, m, row.v), UnitCosts());
        const double theory = TheoryBubble(row.kind, p, m, row.v, UnitCosts());
        std::printf("| %s | %d | %d | %d | %g | %.4f | %.4f | %d |\n",
                    std::string(ScheduleKindName(row.kind)).c_str(), p, m, row.v, t.makespan,
                    t.bubble_fraction, theory, t.stages[0].peak_in_flight);
        EXPECT_NEAR(t.bubble_fraction, theory, 0.1 * theory)
            << ScheduleKindName(row.kind) << " P=" << p << " M=" << m << " v=" << row.v;
      }
    }
  }
}

}  // namespace
}  // namespace sluice::parallel
