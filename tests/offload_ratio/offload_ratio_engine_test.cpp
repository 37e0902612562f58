// Partial optimizer offload through the ZeRO engine at stage 3, on 1, 2 and 3 ranks (mpirun -np
// 1, 2, 3): zero_optimization.offload_optimizer.ratio 0, 0.25, 0.5 and 1, cpu and nvme, f32 and
// bf16, against the same engine with everything on the device; a checkpoint taken through one
// split and restored into another; ratio "auto" under a tight and a generous device.memory_limit;
// and the memory estimate of a split against the bytes the engine holds.
//
// Why bitwise: the split's device part (ShardedAdam) and offloaded part (OffloadedAdam) run the
// same fused Adam kernel over the same fp32 elements as the device optimizer, the split falls on
// a tile boundary, and the gradient shard stays on the device as it does without offload.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <tuple>

#include "engine/config/config.h"
#include "engine/estimate/memory_estimate.h"
#include "engine/train/precision.h"
#include "engine/train/run_setup.h"
#include "engine/zero/offload_ratio.h"
#include "engine/zero/split_optimizer.h"
#include "runtime/check.h"
#include "runtime/device/device_factory.h"
#include "runtime/memory_accounting.h"
#include "tests/common/test_ops.h"
#include "tests/offload_engine/offload_engine_test_util.h"
#include "tests/offload_engine/offload_outcome.h"
#include "tests/zero/zero_test_util.h"

namespace sluice::zero::testing {
namespace {

constexpr int64_t kTile = offload::kOffloadTileQuantum;

using Outcome = OffloadOutcome;

// ---- fixed ratios on the test model ----------------------------------------------------------

ZeroOptions RatioOptions(DType dtype, OffloadDevice tier, double ratio, const std::string& nvme) {
  ZeroOptions o = OffloadTestOptions(3, dtype, tier, OffloadDevice::kNone, nvme);
  o.sub_group_size = kTile;  // several tiles per shard even on 3 ranks
  o.offload_optimizer.ratio = ratio;
  return o;
}

class PartialOffloadTest
    : public ::testing::TestWithParam<std::tuple<double, DType, OffloadDevice>> {};

TEST_P(PartialOffloadTest, BitwiseEqualToTheDeviceOptimizer) {
  const auto [ratio, dtype, tier] = GetParam();
  ScratchDir nvme;
  const ZeroOptions options = RatioOptions(dtype, tier, ratio, nvme.path());
  Result<ZeroRig> rig =
      MakeZeroRig(options, TinyGpt(), TestWorld(), OffloadTrainSettings(dtype).seed);
  ASSERT_TRUE(rig.ok()) << rig.status().ToString();
  const int64_t shard = rig->engine->layout().shard_elements();
  const Outcome split = FinishOffloadRun(*rig, OffloadTrainSettings(dtype));
  const Outcome& device = DeviceBaseline(options, dtype);
  const std::string what =
      fmt::format("ratio {} {} offload {} on {} rank(s), shard of {}", ratio, DTypeName(dtype),
                  OffloadDeviceName(tier), TestWorld().size(), shard);
  ExpectSameTraining(split, device, what);

  // Tiles from floor((1 - ratio) x N) on are offloaded; the rest steps on the device.
  const int64_t on_device = DeviceElementsForRatio(shard, kTile, ratio);
  EXPECT_DOUBLE_EQ(split.offloaded, ratio == 1.0 ? 1.0 : OffloadedFractionOf(shard, on_device))
      << what;
  if (ratio == 0.25 || ratio == 0.5) {
    EXPECT_GT(on_device, 0) << what;
    EXPECT_LT(on_device, shard) << what;
  }
  if (ratio < 1.0) {
    EXPECT_EQ(split.memory.optimizer_state,
              static_cast<uint64_t>(DeviceStateBytesPerElement(dtype) * on_device))
        << what;
    // The gradient shard stays on the device for the device part.
    EXPECT_EQ(split.memory.grad_shard, device.memory.grad_shard) << what;
    EXPECT_EQ(split.memory.host_grad_shard, 0u) << what;
  } else {
    EXPECT_EQ(split.memory.optimizer_state, 0u) << what;
    EXPECT_EQ(split.memory.grad_shard, 0u) << what;
    EXPECT_EQ(split.memory.host_grad_shard, device.memory.grad_shard) << what;
  }
  const bool offloads = on_device < shard || ratio == 1.0;
  EXPECT_EQ(split.memory.optimizer_pinned > 0, offloads) << what;
  if (tier == OffloadDevice::kCpu) {
    EXPECT_EQ(split.memory.optimizer_host > 0, offloads) << what;
    EXPECT_EQ(split.memory.optimizer_nvme, 0u) << what;
  } else {
    EXPECT_EQ(split.memory.optimizer_nvme > 0, offloads) << what;
    EXPECT_EQ(split.memory.optimizer_host, 0u) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(RatiosDtypesTiers, PartialOffloadTest,
                         ::testing::Combine(::testing::Values(0.0, 0.25, 0.5, 1.0),
                                            ::testing::Values(DType::kF32, DType::kBF16),
                                            ::testing::Values(OffloadDevice::kCpu,
                                                              OffloadDevice::kNvme)),
                         [](const auto& info) {
                           return fmt::format("Ratio{}_{}_{}",
                                              static_cast<int>(std::get<0>(info.param) * 100),
                                              DTypeName(std::get<1>(info.param)),
                                              OffloadDeviceName(std::get<2>(info.param)));
                         });

TEST(PartialOffload, WithTheParametersInHostMemory) {
  ScratchDir nvme;
  ZeroOptions options = RatioOptions(DType::kBF16, OffloadDevice::kNvme, 0.5, nvme.path());
  options.offload_param.device = OffloadDevice::kCpu;
  const Outcome split = TrainOffload(options, DType::kBF16);
  ExpectSameTraining(split, DeviceBaseline(options, DType::kBF16),
                     "ratio 0.5 with offload_param cpu");
  EXPECT_EQ(split.memory.param_shard, 0u);
  EXPECT_GT(split.memory.optimizer_state, 0u);
}

// A state exported through one split (ReadState across its boundary) and imported into another
// split with another boundary (RestoreState across it) continues exactly as the device engine.
TEST(PartialOffloadCheckpoint, ExportFromOneSplitImportIntoAnother) {
  const DType dtype = DType::kBF16;
  const TrainSettings settings = OffloadTrainSettings(dtype, /*steps=*/2);
  Result<ZeroRig> device = MakeZeroRig(RatioOptions(dtype, OffloadDevice::kNone, 1.0, ""),
                                       TinyGpt(), TestWorld(), settings.seed);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  ScratchDir nvme;
  Result<ZeroRig> saver = MakeZeroRig(RatioOptions(dtype, OffloadDevice::kNvme, 0.5, nvme.path()),
                                      TinyGpt(), TestWorld(), settings.seed);
  ASSERT_TRUE(saver.ok()) << saver.status().ToString();
  Result<RunResult> a = RunZero(*device, settings);
  Result<RunResult> b = RunZero(*saver, settings);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(Bitwise(a->losses, b->losses));

  Result<ExportedState> saved = ExportEngineState(*saver->engine);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(saved->step, 2);

  Result<ZeroRig> loader = MakeZeroRig(RatioOptions(dtype, OffloadDevice::kCpu, 0.25, ""),
                                       TinyGpt(), TestWorld(), settings.seed + 99);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ASSERT_TRUE(loader->engine->ImportState(saved->Readers()).ok());
  ASSERT_TRUE(loader->engine->PublishParameters().ok());
  EXPECT_EQ(loader->engine->optimizer().step(), 2);

  const Outcome continued_device = FinishOffloadRun(*device, settings);
  const Outcome continued_split = FinishOffloadRun(*loader, settings);
  ExpectSameTraining(continued_split, continued_device, "resumed into ratio 0.25");
}

// ---- configs: ratio "auto" and the estimate --------------------------------------------------

std::string ConfigYaml(DType dtype, const std::string& offload, int64_t memory_limit) {
  return fmt::format(R"(
train_micro_batch_size_per_gpu: 2
optimizer: {{type: adamw, params: {{lr: 1e-3, weight_decay: 0.01}}}}
model: {{family: gpt2, n_layer: 2, n_head: 4, d_model: 64, d_ff: 128, vocab_size: 128,
        seq_len: 16}}
device: {{type: cpu, memory_limit: {}, host_memory_limit: 1GiB, threads: 1}}
zero_optimization: {{stage: 3, sub_group_size: 2048, reduce_bucket_size: 5000,
                    allgather_bucket_size: 8000, stage3_prefetch_bucket_size: 6000,
                    stage3_param_persistence_threshold: 64, offload_optimizer: {}}}
{})",
                     memory_limit, offload, dtype == DType::kBF16 ? "bf16: {enabled: true}" : "");
}

Config LoadTestConfig(const std::string& text) {
  ConfigSources sources;
  sources.env.emplace();
  sources.world_size = TestWorld().size();
  sources.available_host_memory = int64_t{16} << 30;
  Result<Config> config = LoadConfigFromText(text, ConfigFormat::kYaml, sources);
  SLUICE_CHECK(config.ok()) << config.status().ToString();
  return std::move(config).value();
}

// As the trainer does: the auto budget from the estimate, a device of device.memory_limit.
ZeroRig MakeConfigRig(Config config, uint64_t seed) {
  Status budget = estimate::ResolveAutoRatioBudget(&config, TestWorld().size());
  SLUICE_CHECK(budget.ok()) << budget.ToString();
  Result<ZeroOptions> options = ZeroOptionsFromConfig(config);
  SLUICE_CHECK(options.ok()) << options.status().ToString();
  Result<model::ModelOptions> model =
      train::ModelOptionsFromConfig(config, train::PrecisionOf(config.model.dtype));
  SLUICE_CHECK(model.ok()) << model.status().ToString();
  model->param_dtype = DType::kF32;
  model->num_threads = 1;
  ZeroRig rig;
  Result<std::unique_ptr<Device>> device =
      CreateDevice({.memory_limit_bytes = static_cast<uint64_t>(*config.device.memory_limit)});
  SLUICE_CHECK(device.ok()) << device.status().ToString();
  rig.device = std::move(device).value();
  rig.allocator = std::make_unique<model::DeviceAllocator>(*rig.device);
  rig.ops = sluice::testing::CpuOpsOn(*rig.device);
  Result<std::unique_ptr<model::Model<float>>> net =
      model::Model<float>::Create(*model, *rig.allocator, *rig.ops, model::ModelStorage::kExternal);
  SLUICE_CHECK(net.ok()) << net.status().ToString();
  rig.model = std::move(net).value();
  Result<std::unique_ptr<ZeroEngine>> engine =
      ZeroEngine::Create(*options, *rig.model, TestWorld(), *rig.device);
  SLUICE_CHECK(engine.ok()) << engine.status().ToString();
  rig.engine = std::move(engine).value();
  Status initialized = rig.engine->InitializeParameters(seed);
  SLUICE_CHECK(initialized.ok()) << initialized.ToString();
  return rig;
}

estimate::MemoryEstimate Estimate(const Config& config) {
  Result<estimate::MemoryEstimate> e = estimate::EstimateMemory(config, TestWorld().size());
  SLUICE_CHECK(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

TEST(PartialOffloadAuto, ATightBudgetOffloadsMoreAndTrainingStillMatches) {
  const DType dtype = DType::kBF16;
  const int64_t generous_limit = int64_t{256} << 20;
  const std::string offload = "{device: cpu, ratio: auto}";
  const Config generous = LoadTestConfig(ConfigYaml(dtype, offload, generous_limit));
  // What everything but the device part of the optimizer needs: the generous estimate holds the
  // whole shard's device state.
  const estimate::MemoryEstimate e = Estimate(generous);
  const int64_t state = DeviceStateBytesPerElement(dtype) * e.shard_elements;
  ASSERT_EQ(e.bytes(MemoryTier::kDevice, MemoryCategory::kOptimizer), state);
  const int64_t rest = e.tier_bytes(MemoryTier::kDevice) - state;
  // Room for one tile of device state.
  const int64_t tight_limit = rest + DeviceStateBytesPerElement(dtype) * kTile + 4096;
  const Config tight = LoadTestConfig(ConfigYaml(dtype, offload, tight_limit));

  const TrainSettings settings = OffloadTrainSettings(dtype);
  ZeroRig generous_rig = MakeConfigRig(generous, settings.seed);
  ZeroRig tight_rig = MakeConfigRig(tight, settings.seed);
  const auto* g = dynamic_cast<const SplitOptimizer*>(&generous_rig.engine->optimizer());
  const auto* t = dynamic_cast<const SplitOptimizer*>(&tight_rig.engine->optimizer());
  ASSERT_NE(g, nullptr);
  ASSERT_NE(t, nullptr);
  const std::string what = fmt::format(
      "{} rank(s), shard of {}: generous chose {} device elements (ratio {:.3f}, measured device "
      "share {:.3f}), tight {} (ratio {:.3f}, budget {} elements)",
      TestWorld().size(), g->count(), g->device_elements(), g->offload_ratio(),
      g->auto_choice()->balanced_device_share, t->device_elements(), t->offload_ratio(),
      t->auto_choice()->budget_elements);
  // Whole tiles, within the budget.
  for (const SplitOptimizer* s : {g, t}) {
    EXPECT_TRUE(s->device_elements() % kTile == 0 || s->device_elements() == s->count()) << what;
    EXPECT_LE(s->device_elements(), s->auto_choice()->budget_elements) << what;
    ASSERT_TRUE(s->auto_choice()->measured.has_value()) << what;
  }
  EXPECT_EQ(g->auto_choice()->budget_elements, g->count()) << what;
  EXPECT_EQ(t->auto_choice()->budget_elements, kTile) << what;
  // Each engine keeps the balanced share of its own probe (timed on a shared, noisy machine, so
  // the two probes may differ), capped by its budget: the generous one holds all of it, the
  // tight one at most a tile.
  for (const SplitOptimizer* s : {g, t}) {
    const OffloadRatioChoice uncapped =
        ChooseSplit(*s->auto_choice()->measured, s->count(), kTile, s->count());
    EXPECT_EQ(s->device_elements(),
              std::min(uncapped.device_elements, s->auto_choice()->budget_elements))
        << what;
  }

  const Outcome g_out = FinishOffloadRun(generous_rig, settings);
  const Outcome t_out = FinishOffloadRun(tight_rig, settings);
  Config none = generous;
  none.zero.offload_optimizer.device = OffloadDevice::kNone;
  none.zero.offload_optimizer.ratio_auto = false;
  ZeroRig device_rig = MakeConfigRig(none, settings.seed);
  const Outcome d_out = FinishOffloadRun(device_rig, settings);
  ExpectSameTraining(g_out, d_out, "auto, generous: " + what);
  ExpectSameTraining(t_out, d_out, "auto, tight: " + what);
  EXPECT_EQ(t_out.memory.optimizer_state,
            static_cast<uint64_t>(DeviceStateBytesPerElement(dtype) * t->device_elements()));

  // Too tight for a split (whose gradient shard stays on the device): the plain offloaded
  // optimizer, gradients in host memory.
  const Config starved = LoadTestConfig(ConfigYaml(dtype, offload, rest));
  ZeroRig starved_rig = MakeConfigRig(starved, settings.seed);
  EXPECT_EQ(dynamic_cast<const SplitOptimizer*>(&starved_rig.engine->optimizer()), nullptr);
  const Outcome s_out = FinishOffloadRun(starved_rig, settings);
  EXPECT_DOUBLE_EQ(s_out.offloaded, 1.0);
  EXPECT_EQ(s_out.memory.grad_shard, 0u);
  EXPECT_EQ(s_out.memory.host_grad_shard, d_out.memory.grad_shard);
  ExpectSameTraining(s_out, d_out, "auto, no room for a split");
}

class PartialOffloadEstimateTest
    : public ::testing::TestWithParam<std::tuple<double, DType, OffloadDevice>> {};

// Within 0.1% of the engine's bytes, tier by tier, for what the split places.
TEST_P(PartialOffloadEstimateTest, EstimateMatchesTheEngine) {
  const auto [ratio, dtype, tier] = GetParam();
  ScratchDir nvme;
  const std::string offload =
      tier == OffloadDevice::kCpu
          ? fmt::format("{{device: cpu, ratio: {}}}", ratio)
          : fmt::format("{{device: nvme, nvme_path: {}, ratio: {}}}", nvme.path(), ratio);
  const Config config = LoadTestConfig(ConfigYaml(dtype, offload, int64_t{256} << 20));
  const estimate::MemoryEstimate e = Estimate(config);
  ZeroRig rig = MakeConfigRig(config, 7);
  ASSERT_EQ(e.shard_elements, rig.engine->layout().shard_elements());
  MemoryLedger::Global().ResetPeaks();
  const Outcome out = FinishOffloadRun(rig, OffloadTrainSettings(dtype, 2));
  const MemorySnapshot ledger = MemoryLedger::Global().Snapshot();
  const std::string what = fmt::format("ratio {} {} {} on {} rank(s)", ratio, DTypeName(dtype),
                                       OffloadDeviceName(tier), TestWorld().size());
  auto near = [&what](const char* item, int64_t predicted, uint64_t measured) {
    EXPECT_LE(std::abs(static_cast<double>(measured) - static_cast<double>(predicted)),
              0.001 * static_cast<double>(predicted))
        << what << ": " << item << " estimated " << predicted << ", measured " << measured;
  };
  int64_t device_grad_shard = 0;
  for (const estimate::LineItem& item : e.items) {
    if (item.name == "fp32 gradient shard" && item.tier == MemoryTier::kDevice) {
      device_grad_shard += item.bytes;
    }
  }
  const ZeroMemory& m = out.memory;
  EXPECT_GT(m.optimizer_state, 0u) << what;
  near("device optimizer state", e.bytes(MemoryTier::kDevice, MemoryCategory::kOptimizer),
       m.optimizer_state);
  near("device optimizer state (ledger peak)",
       e.bytes(MemoryTier::kDevice, MemoryCategory::kOptimizer),
       ledger.at(MemoryTier::kDevice, MemoryCategory::kOptimizer).peak);
  near("device gradient shard", device_grad_shard, m.grad_shard);
  EXPECT_EQ(m.host_grad_shard, 0u) << what;
  EXPECT_EQ(e.bytes(MemoryTier::kHost, MemoryCategory::kGrads), 0) << what;
  near("offloaded state in host memory", e.bytes(MemoryTier::kHost, MemoryCategory::kOptimizer),
       m.optimizer_host);
  near("pinned staging ring", e.bytes(MemoryTier::kHostPinned, MemoryCategory::kOptimizer),
       m.optimizer_pinned);
  near("offloaded state on NVMe", e.bytes(MemoryTier::kNvme, MemoryCategory::kOptimizer),
       m.optimizer_nvme);
}

INSTANTIATE_TEST_SUITE_P(
    RatiosDtypesTiers, PartialOffloadEstimateTest,
    ::testing::Combine(::testing::Values(0.25, 0.5), ::testing::Values(DType::kF32, DType::kBF16),
                       ::testing::Values(OffloadDevice::kCpu, OffloadDevice::kNvme)),
    [](const auto& info) {
      return fmt::format("Ratio{}_{}_{}", static_cast<int>(std::get<0>(info.param) * 100),
                         DTypeName(std::get<1>(info.param)),
                         OffloadDeviceName(std::get<2>(info.param)));
    });

}  // namespace
}  // namespace sluice::zero::testing
