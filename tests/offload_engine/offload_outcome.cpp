#include "tests/offload_engine/offload_outcome.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "engine/config/config.h"
#include "engine/zero/split_optimizer.h"
#include "runtime/check.h"

namespace sluice::zero::testing {

TrainSettings OffloadTrainSettings(DType dtype, int64_t steps) {
  TrainSettings s;
  s.steps = steps;
  s.world = TestWorld().size();
  s.param_dtype = dtype;
  s.max_grad_norm = 1.0;
  return s;
}

OffloadOutcome FinishOffloadRun(ZeroRig& rig, const TrainSettings& settings) {
  Result<RunResult> run = RunZero(rig, settings);
  SLUICE_CHECK(run.ok()) << run.status().ToString();
  OffloadOutcome out;
  out.run = std::move(run).value();
  out.memory = rig.engine->memory();
  if (rig.engine->param_store() != nullptr) out.param_store = rig.engine->param_store()->stats();
  out.offloaded = rig.engine->optimizer().offload_ratio();
  Result<ExportedState> exported = ExportEngineState(*rig.engine);
  SLUICE_CHECK(exported.ok()) << exported.status().ToString();
  out.master = std::move(exported->master);
  out.exp_avg = std::move(exported->exp_avg);
  out.exp_avg_sq = std::move(exported->exp_avg_sq);
  out.step = exported->step;
  return out;
}

OffloadOutcome TrainOffload(const ZeroOptions& options, const TrainSettings& settings) {
  Result<ZeroRig> rig = MakeZeroRig(options, TinyGpt(), TestWorld(), settings.seed);
  SLUICE_CHECK(rig.ok()) << rig.status().ToString();
  return FinishOffloadRun(*rig, settings);
}

OffloadOutcome TrainOffload(const ZeroOptions& options, DType dtype) {
  return TrainOffload(options, OffloadTrainSettings(dtype));
}

void ExpectImportContinuesBitwise(ZeroRig& device, ZeroRig& imported, int64_t saved_step,
                                  const TrainSettings& settings) {
  ASSERT_TRUE(imported.engine->PublishParameters().ok());
  EXPECT_EQ(imported.engine->optimizer().step(), saved_step);

  // More steps from the same state on both.
  Result<RunResult> a = RunZero(device, settings);
  Result<RunResult> b = RunZero(imported, settings);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(Bitwise(a->losses, b->losses));
  EXPECT_TRUE(Bitwise(a->params, b->params));
}

const OffloadOutcome& DeviceBaseline(const ZeroOptions& options, DType dtype) {
  static std::map<std::tuple<int, DType, int64_t>, OffloadOutcome> cache;
  const auto key = std::make_tuple(options.stage, dtype, options.sub_group_size);
  auto it = cache.find(key);
  if (it == cache.end()) {
    ZeroOptions device = options;
    device.offload_optimizer = Config().zero.offload_optimizer;
    device.offload_param = Config().zero.offload_param;
    it = cache.emplace(key, TrainOffload(device, dtype)).first;
  }
  return it->second;
}

ZeroStateReaders ExportedState::Readers() const {
  auto reader_of = [this](const std::vector<float>& shard) {
    return [this, &shard](int param, int64_t begin, int64_t end, float* dst) -> Status {
      for (const ZeroStateRange& r : ranges) {
        if (r.param == param && r.begin <= begin && end <= r.end) {
          std::memcpy(dst, shard.data() + r.shard_offset + (begin - r.begin),
                      static_cast<size_t>(end - begin) * sizeof(float));
          return OkStatus();
        }
      }
      return NotFoundError("no saved range of parameter {} covers [{}, {})", param, begin, end);
    };
  };
  return {.master = reader_of(master),
          .exp_avg = reader_of(exp_avg),
          .exp_avg_sq = reader_of(exp_avg_sq),
          .optimizer_step = step};
}

Result<ExportedState> ExportEngineState(const ZeroEngine& engine) {
  ExportedState state;
  state.ranges = engine.SavedStateRanges();
  const ZeroOptimizer& optimizer = engine.optimizer();
  const size_t count = static_cast<size_t>(optimizer.count());
  state.master.assign(count, 0.0f);
  state.exp_avg.assign(count, 0.0f);
  state.exp_avg_sq.assign(count, 0.0f);
  SLUICE_RETURN_IF_ERROR(optimizer.ReadState(0, optimizer.count(), state.master.data(),
                                             state.exp_avg.data(), state.exp_avg_sq.data()));
  state.step = optimizer.step();
  return state;
}

void ExpectSameTraining(const OffloadOutcome& a, const OffloadOutcome& b, const std::string& what) {
  EXPECT_TRUE(Bitwise(a.run.losses, b.run.losses)) << what;
  EXPECT_TRUE(Bitwise(a.run.grad_norms, b.run.grad_norms)) << what;
  EXPECT_TRUE(Bitwise(a.run.params, b.run.params)) << what;
  EXPECT_EQ(a.step, b.step) << what;
  EXPECT_TRUE(Bitwise(a.master, b.master)) << what;
  EXPECT_TRUE(Bitwise(a.exp_avg, b.exp_avg)) << what;
  EXPECT_TRUE(Bitwise(a.exp_avg_sq, b.exp_avg_sq)) << what;
}

}  // namespace sluice::zero::testing
