// zero_optimization.offload_optimizer.ratio without an engine: DeepSpeed's split rule, the device
// budget cap, the balanced share "auto" takes, the key in configs (a number in [0, 1] or "auto",
// stage 3 only, not with offload_param nvme) and in the ZeRO options, and what the memory
// estimate places on each tier for a split.
#include "engine/zero/offload_ratio.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/config/config.h"
#include "engine/estimate/memory_estimate.h"
#include "engine/zero/offload_options.h"
#include "engine/zero/zero_options.h"
#include "engine/zero/zero_placement.h"
#include "tests/config/config_test_util.h"

namespace sluice::zero {
namespace {

using ::sluice::testing::LoadJson;
using ::sluice::testing::LoadYaml;

constexpr int64_t kTile = offload::kOffloadTileQuantum;  // 2048

TEST(OffloadRatioRule, KeepsTheFirstTilesOnTheDeviceAsDeepSpeed) {
  const int64_t count = 10 * kTile;
  // Tiles from floor((1 - ratio) x N) on are offloaded.
  EXPECT_EQ(DeviceElementsForRatio(count, kTile, 1.0), 0);
  EXPECT_EQ(DeviceElementsForRatio(count, kTile, 0.0), count);
  EXPECT_EQ(DeviceElementsForRatio(count, kTile, 0.3), 7 * kTile);
  EXPECT_EQ(DeviceElementsForRatio(count, kTile, 0.25), 7 * kTile);  // floor(7.5)
  // (1 - 0.9) x 10 is 0.9999999999999998 in doubles: still one tile.
  EXPECT_EQ(DeviceElementsForRatio(count, kTile, 0.9), kTile);
  // A partial last tile counts as a tile; ratio 0 keeps all of it.
  EXPECT_EQ(DeviceElementsForRatio(2 * kTile + 700, kTile, 0.5), kTile);  // floor(1.5)
  EXPECT_EQ(DeviceElementsForRatio(2 * kTile + 700, kTile, 0.0), 2 * kTile + 700);
  EXPECT_EQ(DeviceElementsForRatio(0, kTile, 0.5), 0);
}

TEST(OffloadRatioRule, ReportsTheOffloadedFractionOfASplit) {
  EXPECT_DOUBLE_EQ(OffloadedFractionOf(4 * kTile, kTile), 0.75);
  EXPECT_DOUBLE_EQ(OffloadedFractionOf(4 * kTile, 0), 1.0);
  EXPECT_DOUBLE_EQ(OffloadedFractionOf(4 * kTile, 4 * kTile), 0.0);
  EXPECT_DOUBLE_EQ(OffloadedFractionOf(0, 0), 1.0);
}

TEST(OffloadRatioBudget, CapsTheDevicePartAtWholeTiles) {
  EXPECT_EQ(DeviceStateBytesPerElement(DType::kF32), 8);    // m, v: the master is the shard
  EXPECT_EQ(DeviceStateBytesPerElement(DType::kBF16), 12);  // + the fp32 master
  // Three buffers of 256-byte aligned reservations in bf16, two in f32.
  EXPECT_EQ(DeviceElementsWithinBudget(12 * 3 * kTile + 3 * 256, DType::kBF16, 100 * kTile, kTile),
            3 * kTile);
  EXPECT_EQ(
      DeviceElementsWithinBudget(12 * 3 * kTile + 3 * 256 - 1, DType::kBF16, 100 * kTile, kTile),
      2 * kTile);
  EXPECT_EQ(DeviceElementsWithinBudget(8 * kTile + 2 * 256, DType::kF32, 100 * kTile, kTile),
            kTile);
  // When the whole shard fits, all of it (a partial last tile included).
  EXPECT_EQ(DeviceElementsWithinBudget(int64_t{1} << 30, DType::kF32, 5000, kTile), 5000);
  EXPECT_EQ(DeviceElementsWithinBudget(-5, DType::kF32, 5000, kTile), 0);
}

TEST(OffloadRatioChoice, BalancesTheMeasuredThroughputsInWholeTiles) {
  OptimizerThroughput t;
  t.device_elements_per_s = 3e9;
  t.offloaded_elements_per_s = 1e9;
  EXPECT_DOUBLE_EQ(BalancedDeviceShare(t), 0.75);
  const int64_t count = 16 * kTile;
  OffloadRatioChoice c = ChooseSplit(t, count, kTile, count);
  EXPECT_EQ(c.device_elements, 12 * kTile);
  EXPECT_DOUBLE_EQ(c.ratio, 0.25);
  // Both parts then take the same time: 12 tiles at 3e9/s, 4 at 1e9/s.
  EXPECT_DOUBLE_EQ(static_cast<double>(c.device_elements) / t.device_elements_per_s,
                   static_cast<double>(count - c.device_elements) / t.offloaded_elements_per_s);
  // The device budget caps it.
  c = ChooseSplit(t, count, kTile, 5 * kTile);
  EXPECT_EQ(c.device_elements, 5 * kTile);
  EXPECT_DOUBLE_EQ(c.ratio, 11.0 / 16.0);
  // A slow device keeps (almost) nothing there; rounding is to the nearest tile.
  t.device_elements_per_s = 1e8;
  t.offloaded_elements_per_s = 3.1e9;  // f = 1/32: half a tile of 16 rounds to 1
  EXPECT_EQ(ChooseSplit(t, count, kTile, count).device_elements, kTile);
  t.device_elements_per_s = 1e8;
  t.offloaded_elements_per_s = 9e9;
  EXPECT_EQ(ChooseSplit(t, count, kTile, count).device_elements, 0);
}

// ---- the config key ------------------------------------------------------------------------

std::string Yaml(const std::string& zero) {
  return "train_batch_size: 8\nzero_optimization: " + zero + "\n";
}

void ExpectErrorNaming(const Result<Config>& config, const std::vector<std::string>& parts) {
  ASSERT_FALSE(config.ok());
  for (const std::string& part : parts) {
    EXPECT_NE(config.status().message().find(part), std::string::npos)
        << "missing \"" << part << "\" in: " << config.status().ToString();
  }
}

TEST(OffloadRatioConfig, AcceptsANumberOrAutoInYamlAndJson) {
  Result<Config> yaml = LoadYaml(Yaml("{stage: 3, offload_optimizer: {device: cpu, ratio: 0.25}}"));
  ASSERT_TRUE(yaml.ok()) << yaml.status().ToString();
  EXPECT_DOUBLE_EQ(yaml->zero.offload_optimizer.ratio, 0.25);
  EXPECT_FALSE(yaml->zero.offload_optimizer.ratio_auto);

  yaml =
      LoadYaml(Yaml("{stage: 3, offload_optimizer: {device: nvme, nvme_path: /tmp, ratio: "
                    "auto}}"));
  ASSERT_TRUE(yaml.ok()) << yaml.status().ToString();
  EXPECT_TRUE(yaml->zero.offload_optimizer.ratio_auto);
  EXPECT_EQ(yaml->zero.offload_optimizer.auto_state_budget, -1);
  // "auto" stays "auto" in what is written back (checkpoint and run records).
  EXPECT_EQ(yaml->values.ToNestedJson()["zero_optimization"]["offload_optimizer"]["ratio"], "auto");

  Result<Config> json = LoadJson(
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
          "offload_optimizer": {"device": "cpu", "ratio": "auto"}}})");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_TRUE(json->zero.offload_optimizer.ratio_auto);
  EXPECT_DOUBLE_EQ(json->zero.offload_optimizer.ratio, 1.0);
}

TEST(OffloadRatioConfig, AutoWithNothingOffloadedIsOne) {
  Result<Config> config = LoadYaml(Yaml("{stage: 2, offload_optimizer: {ratio: auto}}"));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_FALSE(config->zero.offload_optimizer.ratio_auto);
  EXPECT_DOUBLE_EQ(config->zero.offload_optimizer.ratio, 1.0);
}

TEST(OffloadRatioConfig, ErrorsNameTheKey) {
  const std::string key = "zero_optimization.offload_optimizer.ratio";
  ExpectErrorNaming(LoadYaml(Yaml("{stage: 3, offload_optimizer: {device: cpu, ratio: 1.5}}")),
                    {key, "1.5"});
  ExpectErrorNaming(LoadYaml(Yaml("{stage: 3, offload_optimizer: {device: cpu, ratio: fast}}")),
                    {key, "fast"});
  ExpectErrorNaming(LoadJson(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
                       "offload_optimizer": {"device": "cpu", "ratio": "fast"}}})"),
                    {key, "fast"});
  ExpectErrorNaming(LoadYaml(Yaml("{stage: 2, offload_optimizer: {device: cpu, ratio: 0.5}}")),
                    {key, "needs zero_optimization.stage 3"});
  ExpectErrorNaming(LoadYaml(Yaml("{stage: 2, offload_optimizer: {device: cpu, ratio: auto}}")),
                    {key, "\"auto\"", "needs zero_optimization.stage 3"});
  ExpectErrorNaming(
      LoadYaml(Yaml("{stage: 3, offload_optimizer: {device: cpu, ratio: 0.5}, offload_param: "
                    "{device: nvme, nvme_path: /tmp}}")),
      {key, "zero_optimization.offload_param.device nvme"});
}

// Where a split keeps the gradient shard (the config refuses a partial offload below stage 3,
// with Lion, or with the parameters on NVMe: config_errors_test).
TEST(OffloadRatioOptions, ASplitReadsItsGradientsOnTheDevice) {
  ZeroOptions o = DefaultZeroOptions();
  o.stage = 3;
  o.offload_optimizer.device = OffloadDevice::kCpu;
  o.offload_optimizer.ratio = 0.5;
  EXPECT_EQ(PlaceZeroState(o).grad_shard, StateTier::kDevice)
      << "a split's device part reads its gradients on the device";
  o.offload_optimizer.ratio = 1.0;
  EXPECT_EQ(PlaceZeroState(o).grad_shard, StateTier::kHost);
  o.offload_optimizer.ratio_auto = true;
  EXPECT_EQ(PlaceZeroState(o).grad_shard, StateTier::kDevice);
}

// ---- the estimate --------------------------------------------------------------------------

std::string EstimateYaml(const std::string& offload, const std::string& memory_limit = "512MiB") {
  return "train_micro_batch_size_per_gpu: 2\n"
         "optimizer: {type: adamw, params: {lr: 1e-3}}\n"
         "model: {family: gpt2, n_layer: 2, n_head: 4, d_model: 64, d_ff: 256, vocab_size: 512, "
         "seq_len: 32}\n"
         "device: {type: cpu, memory_limit: " +
         memory_limit +
         ", host_memory_limit: 1GiB, threads: 1}\n"
         "bf16: {enabled: true}\n"
         "zero_optimization: {stage: 3, sub_group_size: 4096, offload_optimizer: " +
         offload + "}\n";
}

int64_t ItemBytes(const estimate::MemoryEstimate& e, std::string_view name, MemoryTier tier) {
  int64_t bytes = 0;
  for (const estimate::LineItem& item : e.items) {
    if (item.name == name && item.tier == tier) bytes += item.bytes;
  }
  return bytes;
}

int64_t Pages(int64_t bytes) { return (bytes + 4095) / 4096 * 4096; }

TEST(OffloadRatioEstimate, PlacesTheFirstTilesOnTheDeviceAndTheRestOffloaded) {
  Result<Config> config = LoadYaml(EstimateYaml("{device: cpu, ratio: 0.5}"));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  Result<estimate::MemoryEstimate> e = estimate::EstimateMemory(*config, 2);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const int64_t shard = e->shard_elements;
  const int64_t device = DeviceElementsForRatio(shard, 4096, 0.5);
  ASSERT_GT(device, 0);
  ASSERT_LT(device, shard);
  const int64_t off = shard - device;
  EXPECT_EQ(e->bytes(MemoryTier::kDevice, MemoryCategory::kOptimizer), 12 * device);
  // The whole gradient shard on the device; none in host memory.
  EXPECT_EQ(ItemBytes(*e, "fp32 gradient shard", MemoryTier::kDevice), 4 * shard);
  EXPECT_EQ(e->bytes(MemoryTier::kHost, MemoryCategory::kGrads), 0);
  EXPECT_EQ(e->bytes(MemoryTier::kHost, MemoryCategory::kOptimizer), 3 * Pages(4 * off));
  EXPECT_GT(e->bytes(MemoryTier::kHostPinned, MemoryCategory::kOptimizer), 0);

  // Ratio 1 as before: nothing on the device, the gradient shard in host memory.
  config = LoadYaml(EstimateYaml("{device: cpu, ratio: 1}"));
  ASSERT_TRUE(config.ok());
  e = estimate::EstimateMemory(*config, 2);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->bytes(MemoryTier::kDevice, MemoryCategory::kOptimizer), 0);
  EXPECT_EQ(e->bytes(MemoryTier::kHost, MemoryCategory::kGrads), Pages(4 * shard));
}

TEST(OffloadRatioEstimate, AutoIsTheBudgetCappedWorstCase) {
  // A generous limit holds the whole device part; a tight one only what it leaves.
  Result<Config> generous = LoadYaml(EstimateYaml("{device: cpu, ratio: auto}"));
  ASSERT_TRUE(generous.ok()) << generous.status().ToString();
  Result<estimate::MemoryEstimate> g = estimate::EstimateMemory(*generous, 1);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_TRUE(g->auto_state_budget.has_value());
  const int64_t shard = g->shard_elements;
  EXPECT_EQ(g->bytes(MemoryTier::kDevice, MemoryCategory::kOptimizer), 12 * shard);
  // Worst case per tier: the host holds the state of the whole shard too.
  EXPECT_EQ(g->bytes(MemoryTier::kHost, MemoryCategory::kOptimizer), 3 * Pages(4 * shard));
  const int64_t rest = g->tier_bytes(MemoryTier::kDevice) - 12 * shard;

  // Leave room for exactly 5 tiles of device state (and a little).
  const int64_t limit = rest + 12 * 5 * 4096 + 1000;
  Result<Config> tight =
      LoadYaml(EstimateYaml("{device: cpu, ratio: auto}", std::to_string(limit)));
  ASSERT_TRUE(tight.ok()) << tight.status().ToString();
  Result<estimate::MemoryEstimate> t = estimate::EstimateMemory(*tight, 1);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t->auto_state_budget.has_value());
  EXPECT_EQ(*t->auto_state_budget, limit - rest);
  EXPECT_EQ(t->bytes(MemoryTier::kDevice, MemoryCategory::kOptimizer), 12 * 5 * 4096);
  EXPECT_LE(t->tier_bytes(MemoryTier::kDevice), limit);

  ASSERT_TRUE(estimate::ResolveAutoRatioBudget(&*tight, 1).ok());
  EXPECT_EQ(tight->zero.offload_optimizer.auto_state_budget, limit - rest);
  EXPECT_TRUE(tight->zero.offload_optimizer.ratio_auto);

  // No room for one tile next to the split's device gradient shard: everything is offloaded, as
  // with ratio 1, the gradient shard in host memory (which may then fit where a split cannot).
  const int64_t starved_limit = rest + 12 * 4096;
  Result<Config> starved =
      LoadYaml(EstimateYaml("{device: cpu, ratio: auto}", std::to_string(starved_limit)));
  ASSERT_TRUE(starved.ok());
  Result<estimate::MemoryEstimate> s = estimate::EstimateMemory(*starved, 1);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->auto_offloads_all);
  EXPECT_EQ(s->bytes(MemoryTier::kDevice, MemoryCategory::kOptimizer), 0);
  EXPECT_EQ(s->bytes(MemoryTier::kHost, MemoryCategory::kGrads), Pages(4 * shard));
  EXPECT_EQ(s->tier_bytes(MemoryTier::kDevice), rest - 4 * shard);
  ASSERT_TRUE(estimate::ResolveAutoRatioBudget(&*starved, 1).ok());
  EXPECT_FALSE(starved->zero.offload_optimizer.ratio_auto);
  EXPECT_DOUBLE_EQ(starved->zero.offload_optimizer.ratio, 1.0);
  // A fixed ratio is left alone.
  Result<Config> fixed = LoadYaml(EstimateYaml("{device: cpu, ratio: 0.5}"));
  ASSERT_TRUE(fixed.ok());
  ASSERT_TRUE(estimate::ResolveAutoRatioBudget(&*fixed, 1).ok());
  EXPECT_EQ(fixed->zero.offload_optimizer.auto_state_budget, -1);
}

}  // namespace
}  // namespace sluice::zero
