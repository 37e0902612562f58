// The execution model of a ZeRO pass (docs/architecture.md "Execution"): the host enqueues the
// whole forward and backward, the parameter gathers and the gradient reductions, without ever
// blocking on device work; the streams order themselves with events. Read from the trace of a
// step on N ranks (mpirun -np 1..3), every stage with overlap_comm on: no host wait (the trace
// lane host_wait, which the CPU backend records for every Stream/Event/Device::Synchronize called
// by a host thread) between the first and the last unit hook of the pass, and the host reaches
// the last hook while the compute stream is still working on the pass.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "runtime/trace.h"
#include "zero_test_util.h"

namespace sluice::zero::testing {
namespace {

// Host times of the first and the last unit hook of a training pass (the forward of unit 0,
// the backward of unit 0).
class HookClock final : public model::UnitHooks {
 public:
  Status BeforeForward(int unit) override {
    if (unit == 0) first_ns = TraceClockNs();
    return OkStatus();
  }
  Status AfterBackward(int unit) override {
    if (unit == 0) last_ns = TraceClockNs();
    return OkStatus();
  }
  int64_t first_ns = 0;
  int64_t last_ns = 0;
};

class StreamOrder : public ::testing::TestWithParam<int> {};

TEST_P(StreamOrder, NoHostWaitInsideTheStepAndTheHostRunsAhead) {
  ZeroOptions options = DefaultZeroOptions();
  options.stage = GetParam();
  options.overlap_comm = true;
  options.num_threads = 1;
  options.reduce_bucket_size = 20000;
  options.stage3_prefetch_bucket_size = 20000;
  options.stage3_param_persistence_threshold = 128;
  Result<ZeroRig> rig = MakeZeroRig(options, SlowerGpt(), TestWorld(), 5);
  ASSERT_TRUE(rig.ok()) << rig.status().ToString();
  TrainSettings settings;
  settings.steps = 1;
  settings.sequences_per_rank = 4;
  settings.world = TestWorld().size();
  // The first step records the stage-3 module trace and compares it across ranks (a control
  // collective the host waits for, once per run).
  ASSERT_TRUE(RunZero(*rig, settings).ok());

  TraceRecorder& recorder = TraceRecorder::Global();
  HookClock hooks;
  rig->engine->SetUserHooks(&hooks);
  // Whether the host is still ahead when it enqueues the last unit depends on the scheduler of
  // a loaded machine: up to three steps, one that shows it proves it. The absence of host waits
  // is asserted on every one of them.
  bool ran_ahead = false;
  for (int attempt = 0; attempt < 3 && !ran_ahead; ++attempt) {
    recorder.Clear();
    recorder.Enable();
    Result<RunResult> run = RunZero(*rig, settings);
    recorder.Disable();
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    ASSERT_GT(hooks.last_ns, hooks.first_ns);
    const std::vector<TraceEvent> events = recorder.Snapshot();
    int64_t waits = 0;
    int64_t compute_end = 0;
    for (const TraceEvent& e : events) {
      if (e.lane == kTraceLaneHostWait) {
        ++waits;
        EXPECT_FALSE(e.start_ns > hooks.first_ns && e.start_ns < hooks.last_ns)
            << "stage " << options.stage << ": the host waited (" << e.name << ") "
            << (e.start_ns - hooks.first_ns) / 1000 << " us into the pass, before it enqueued "
            << "the last unit";
      }
      if (e.lane == kTraceLaneCompute && e.end_ns > compute_end) compute_end = e.end_ns;
    }
    EXPECT_GT(waits, 0) << "the step's read-backs are host waits: the trace must show them";
    ran_ahead = compute_end > hooks.last_ns;
  }
  rig->engine->SetUserHooks(nullptr);
  recorder.Clear();
  EXPECT_TRUE(ran_ahead) << "stage " << options.stage
                         << ": the compute stream had finished the pass before the host "
                            "enqueued its last unit, in three steps";
}

INSTANTIATE_TEST_SUITE_P(Stages, StreamOrder, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "stage" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace sluice::zero::testing
