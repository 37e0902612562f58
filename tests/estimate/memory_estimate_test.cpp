// EstimateMemory on configs: what each ZeRO stage shards, where offload puts state, the buffers,
// and the errors.
#include "engine/estimate/memory_estimate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "estimate_test_util.h"

namespace sluice::estimate {
namespace {

using testing::BaseYaml;
using testing::LoadYaml;
constexpr MemoryTier kDevice = MemoryTier::kDevice;
constexpr MemoryTier kPinned = MemoryTier::kHostPinned;
constexpr MemoryTier kHost = MemoryTier::kHost;
constexpr MemoryTier kNvme = MemoryTier::kNvme;
constexpr MemoryCategory kParams = MemoryCategory::kParams;
constexpr MemoryCategory kGrads = MemoryCategory::kGrads;
constexpr MemoryCategory kOptimizer = MemoryCategory::kOptimizer;
constexpr MemoryCategory kActivations = MemoryCategory::kActivations;
constexpr MemoryCategory kBuffers = MemoryCategory::kBuffers;

// The base model's parameters, registry order: wte, wpe, 4 x (ln_1 w b, c_attn w b, c_proj w b,
// ln_2 w b, c_fc w b, mlp.c_proj w b), ln_f w b.
std::vector<int64_t> BaseParameters() {
  std::vector<int64_t> params = {1000 * 128, 128 * 128};
  for (int layer = 0; layer < 4; ++layer) {
    params.insert(params.end(), {128, 128, 384 * 128, 384, 128 * 128, 128, 128, 128, 512 * 128, 512,
                                 128 * 512, 128});
  }
  params.insert(params.end(), {128, 128});
  return params;
}
constexpr int64_t kPsi = 1000 * 128 + 128 * 128 + 4 * (12 * 128 * 128 + 13 * 128) + 2 * 128;

// Every rank's shard: each parameter cut into ceil(numel / N) elements.
int64_t Shard(int world) {
  int64_t shard = 0;
  for (int64_t numel : BaseParameters()) shard += (numel + world - 1) / world;
  return shard;
}

MemoryEstimate Estimate(const Config& config, int world_size, EstimateOptions options = {}) {
  Result<MemoryEstimate> estimate = EstimateMemory(config, world_size, options);
  EXPECT_TRUE(estimate.ok()) << estimate.status().ToString();
  return estimate.ok() ? *estimate : MemoryEstimate{};
}

const LineItem* FindItem(const MemoryEstimate& e, const std::string& prefix) {
  for (const LineItem& item : e.items) {
    if (item.name.starts_with(prefix)) return &item;
  }
  return nullptr;
}

int64_t ItemBytes(const MemoryEstimate& e, const std::string& prefix) {
  const LineItem* item = FindItem(e, prefix);
  return item == nullptr ? 0 : item->bytes;
}

class StageShardingTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

// bf16 under the ZeRO engine: an fp32 compute copy of the parameters below stage 3 and a shard
// in bf16 (2 B); fp32 gradients, whole below stage 2 and a shard from stage 1; the optimizer's
// fp32 master, m and v (12 B) over the shard. Stage 0 on one rank is no exception (`sluice
// train` runs it through the engine too).
TEST_P(StageShardingTest, ModelStatesFollowTheStage) {
  const auto [stage, world] = GetParam();
  const Config config = LoadYaml(BaseYaml(fmt::format("stage: {}", stage)), world);
  const MemoryEstimate e = Estimate(config, world);
  ASSERT_EQ(e.parameters, kPsi);
  const int64_t shard = stage == 0 ? kPsi : Shard(world);
  EXPECT_EQ(e.shard_elements, shard);
  EXPECT_EQ(e.bytes(kDevice, kOptimizer), 12 * shard);
  EXPECT_EQ(ItemBytes(e, "replicated fp32 compute parameters"), stage <= 2 ? 4 * kPsi : 0);
  EXPECT_EQ(ItemBytes(e, stage == 0 ? "parameters (storage dtype)" : "parameter shard"), 2 * shard);
  EXPECT_EQ(ItemBytes(e, "replicated fp32 gradients"), stage <= 1 ? 4 * kPsi : 0);
  EXPECT_EQ(ItemBytes(e, "fp32 gradient shard"), stage >= 1 ? 4 * shard : 0);
  EXPECT_EQ(e.host_bytes() + e.tier_bytes(kNvme), 0);
  // The optimizer's share shrinks as 1/N from stage 1; parameters from stage 3.
  if (stage >= 1) {
    EXPECT_LE(e.bytes(kDevice, kOptimizer) * world, 12 * (kPsi + BaseParameters().size() * world));
  }
  // Activations do not depend on the stage or the ranks.
  EXPECT_EQ(e.bytes(kDevice, kActivations),
            Estimate(LoadYaml(BaseYaml()), 1).bytes(kDevice, kActivations));
}

INSTANTIATE_TEST_SUITE_P(StagesAndRanks, StageShardingTest,
                         ::testing::Combine(::testing::Range(0, 4), ::testing::Range(1, 5)));

TEST(MemoryEstimateTest, ShardsArePerParameterCeilingsWithPadding) {
  const MemoryEstimate e = Estimate(LoadYaml(BaseYaml("stage: 3"), 5), 5);
  // 128 = 5 x 26 - 2, 384 = 5 x 77 - 1, ...: every parameter pads its own partition.
  EXPECT_EQ(e.shard_elements, Shard(5));
  EXPECT_GT(e.shard_elements * 5, kPsi);
  int64_t last = 0;
  for (int64_t numel : BaseParameters()) last += numel - 4 * ((numel + 4) / 5);
  EXPECT_EQ(e.last_shard_elements, last);
  EXPECT_EQ(ItemBytes(e, "parameter shard"), 2 * Shard(5));
}

TEST(MemoryEstimateTest, PeaksAddWhatIsAliveTogether) {
  const MemoryEstimate e = Estimate(
      LoadYaml(BaseYaml("stage: 3, overlap_comm: false, stage3_max_reuse_distance: 0"), 3), 3);
  int64_t device = 0;
  for (const LineItem& item : e.items) {
    EXPECT_GT(item.bytes, 0) << item.name;
    EXPECT_FALSE(item.formula.empty()) << item.name;
    if (item.tier == kDevice) device += item.bytes;
  }
  // Every collective stages through one buffer held from the engine's start (the largest
  // collective's); a unit's scratch comes on top of it.
  const int64_t scratch = ItemBytes(e, "forward/backward scratch");
  const LineItem* staging = FindItem(e, "collective staging");
  ASSERT_NE(staging, nullptr);
  ASSERT_GT(scratch, 0);
  EXPECT_EQ(staging->lifetime, Lifetime::kHeld);
  EXPECT_EQ(e.bytes(kDevice, kBuffers), scratch + staging->bytes);
  // Gradients: the shard (held) and the unit gradient buffers (through the pass) add up.
  EXPECT_EQ(e.bytes(kDevice, kGrads),
            ItemBytes(e, "fp32 gradient shard") + ItemBytes(e, "unit gradient buffers"));
  EXPECT_EQ(e.tier_bytes(kDevice), device);
  EXPECT_EQ(e.total_bytes(), e.tier_bytes(kDevice));

  // With overlap_comm the collectives in flight still stage through the one buffer, in turn.
  const MemoryEstimate overlapped = Estimate(
      LoadYaml(BaseYaml("stage: 3, overlap_comm: true, stage3_max_reuse_distance: 0"), 3), 3);
  EXPECT_EQ(ItemBytes(overlapped, "collective staging"), staging->bytes);
}

TEST(MemoryEstimateTest, PrecisionSetsTheElementSizes) {
  std::string f32_yaml = BaseYaml("stage: 1");
  f32_yaml.erase(f32_yaml.find("bf16: {enabled: true}"), 21);
  const MemoryEstimate f32 = Estimate(LoadYaml(f32_yaml, 2), 2);
  ASSERT_EQ(f32.precision, "f32");
  EXPECT_EQ(f32.bytes(kDevice, kParams), 4 * kPsi + 4 * Shard(2));
  // f32: the fp32 shard is the master copy, the optimizer holds m and v only.
  EXPECT_EQ(f32.bytes(kDevice, kOptimizer), 8 * Shard(2));
  EXPECT_EQ(FindItem(f32, "fp32 master"), nullptr);
  // Stage 0 in f32: the compute copy is the master copy too, no separate shard.
  f32_yaml.replace(f32_yaml.find("stage: 1"), 8, "stage: 0");
  const MemoryEstimate f32_stage0 = Estimate(LoadYaml(f32_yaml, 2), 2);
  EXPECT_EQ(f32_stage0.bytes(kDevice, kParams), 4 * kPsi);

  // f16 on one rank at stage 0: the fp32 compute copy and the parameters in fp16.
  std::string f16_yaml = BaseYaml("stage: 0");
  f16_yaml.replace(f16_yaml.find("bf16"), 4, "fp16");
  const MemoryEstimate f16 = Estimate(LoadYaml(f16_yaml), 1);
  ASSERT_EQ(f16.precision, "f16");
  EXPECT_EQ(f16.bytes(kDevice, kParams), 4 * kPsi + 2 * kPsi);
  EXPECT_EQ(f16.bytes(kDevice, kOptimizer), 12 * kPsi);
  // Sharded, the f16 shard is 2 B per element.
  f16_yaml.replace(f16_yaml.find("stage: 0"), 8, "stage: 2");
  const MemoryEstimate f16_zero = Estimate(LoadYaml(f16_yaml, 2), 2);
  EXPECT_EQ(ItemBytes(f16_zero, "parameter shard"), 2 * Shard(2));
}

TEST(MemoryEstimateTest, CommunicationBuffersFollowTheEngine) {
  // One staging buffer, sized for the largest collective. Below stage 2 the gradients are
  // reduced in place; stage 1 all-gathers the updated parameters (bf16) even on one rank, in
  // buckets of at most allgather_bucket_size = 50,000 gathered elements or one larger
  // parameter alone (wte's 128,000).
  const MemoryEstimate s1 = Estimate(LoadYaml(BaseYaml("stage: 1")), 1);
  EXPECT_EQ(ItemBytes(s1, "collective staging"), 2 * 128000);
  // Stage 2 on 2 ranks: the gradients of a backward are reduce-scattered (fp32) in buckets of
  // at most reduce_bucket_size = 100,000 elements or one larger parameter alone: wte's bucket
  // is the largest collective.
  const MemoryEstimate s2 = Estimate(LoadYaml(BaseYaml("stage: 2"), 2), 2);
  EXPECT_EQ(ItemBytes(s2, "collective staging"), 4 * 128000);
  // Unit gradient buffers: the tied token table's (with wpe, 144,384 elements) is bound from
  // the LM head's backward to the embeddings' (the whole backward); blocks (198,272 elements)
  // are freed with the bucket that takes their first parameter, so two are alive at the peak.
  const int64_t block = 12 * 128 * 128 + 13 * 128;
  EXPECT_EQ(ItemBytes(s2, "unit gradient buffers"), 4 * (1000 * 128 + 128 * 128 + 2 * block));
  // Stage 3: persistent parameters (<= 1000 elements: every norm and bias, fp32) and the
  // coordinator's gathered units: with the default reuse distance every unit comes back within
  // it, so all non-persistent parameters end up gathered.
  const MemoryEstimate s3 = Estimate(LoadYaml(BaseYaml("stage: 3"), 2), 2);
  const int64_t persistent = 4 * 13 * 128 + 2 * 128;
  EXPECT_EQ(ItemBytes(s3, "persistent parameters"), 4 * persistent);
  EXPECT_EQ(ItemBytes(s3, "gathered parameters"), 4 * (kPsi - persistent));
  // A reuse distance of 0 keeps nothing: the running unit plus 20,000 elements of prefetch,
  // which always brings one more unit.
  const MemoryEstimate lean =
      Estimate(LoadYaml(BaseYaml("stage: 3, stage3_max_reuse_distance: 0"), 2), 2);
  EXPECT_EQ(ItemBytes(lean, "gathered parameters"), 4 * 2 * (block - 13 * 128));
  // Stage 3's gathers (N x (partitions + a tag) bf16 elements: a block's 2 x 98,305, the
  // persistent parameters' 2 x 3,457) are smaller than wte's reduce-scatter bucket.
  EXPECT_EQ(ItemBytes(s3, "collective staging"), 4 * 128000);
}

// Where engine/zero/zero_optimizer.cpp puts an offloaded optimizer: the fp32 gradient shard and
// the state in pageable host memory (whole pages), only the staging ring of buffer_count tiles
// pinned.
TEST(MemoryEstimateTest, OptimizerOffloadPutsStateInHostMemoryAndOnlyStagingPinned) {
  const Config config = LoadYaml(BaseYaml("stage: 2, offload_optimizer: {device: cpu}"), 4);
  const MemoryEstimate e = Estimate(config, 4);
  const int64_t shard = Shard(4);
  const auto pages = [](int64_t bytes) { return (bytes + 4095) / 4096 * 4096; };
  EXPECT_EQ(e.bytes(kDevice, kOptimizer), 0);
  EXPECT_EQ(FindItem(e, "fp32 gradient shard for the offloaded optimizer")->tier, kHost);
  EXPECT_EQ(e.bytes(kHost, kOptimizer), 3 * pages(4 * shard));
  EXPECT_EQ(e.bytes(kHost, kGrads), pages(4 * shard));
  // The shard is smaller than one tile: each of the 4 slots holds the shard's fp32 gradients and
  // its bf16 parameters.
  EXPECT_EQ(e.bytes(kPinned, kOptimizer), 4 * (pages(4 * shard) + pages(2 * shard)));
  EXPECT_EQ(e.bytes(kDevice, kParams), 4 * kPsi + 2 * shard);
}

// With the whole optimizer offloaded, each reduced gradient bucket is copied out to pinned memory
// to be added into the host shard (engine/zero/reduce_scatter_reducer.h): one buffer of this
// rank's piece of the largest bucket, a quarter of the device's reduce-scatter staging at 4
// ranks. Without offload the piece is accumulated on the device and nothing is pinned for it.
TEST(MemoryEstimateTest, AnOffloadedOptimizersReducedBucketsPassThroughPinnedMemory) {
  const MemoryEstimate offloaded =
      Estimate(LoadYaml(BaseYaml("stage: 2, offload_optimizer: {device: cpu}"), 4), 4);
  const int64_t piece =
      ItemBytes(offloaded, "reduced gradient bucket copied out for the host shard");
  EXPECT_GT(piece, 0);
  EXPECT_EQ(offloaded.bytes(kPinned, kGrads), piece);
  EXPECT_LE(4 * piece,
            ItemBytes(offloaded, "collective staging (one buffer, the largest collective's)"));
  const MemoryEstimate on_device = Estimate(LoadYaml(BaseYaml("stage: 2"), 4), 4);
  EXPECT_EQ(FindItem(on_device, "reduced gradient bucket copied out for the host shard"), nullptr);
  EXPECT_EQ(on_device.bytes(kPinned, kGrads), 0);
}

// Lion keeps one fp32 moment (exp_avg) where Adam keeps two: on the device 8 B per shard element
// (master + m in bf16) instead of 12; offloaded, the host state, the NVMe extents and the staging
// slots' state region shrink the same way.
TEST(MemoryEstimateTest, LionKeepsOneMoment) {
  const std::string lion = "optimizer: {type: Lion, params: {lr: 1.0e-4}}\n";
  const int64_t shard = Shard(2);
  const MemoryEstimate device = Estimate(LoadYaml(BaseYaml("stage: 2", lion), 2), 2);
  EXPECT_EQ(ItemBytes(device, "Lion exp_avg (fp32)"), 4 * shard);
  EXPECT_EQ(FindItem(device, "Adam"), nullptr);
  EXPECT_EQ(device.bytes(kDevice, kOptimizer), 8 * shard);
  const MemoryEstimate adam = Estimate(LoadYaml(BaseYaml("stage: 2"), 2), 2);
  EXPECT_EQ(adam.bytes(kDevice, kOptimizer) - device.bytes(kDevice, kOptimizer), 4 * shard);

  const auto pages = [](int64_t bytes) { return (bytes + 4095) / 4096 * 4096; };
  const MemoryEstimate cpu =
      Estimate(LoadYaml(BaseYaml("stage: 2, offload_optimizer: {device: cpu}", lion), 2), 2);
  EXPECT_EQ(cpu.bytes(kDevice, kOptimizer), 0);
  EXPECT_EQ(cpu.bytes(kHost, kOptimizer), 2 * pages(4 * shard));

  // NVMe, tiles of 98,304 elements: 8 B per element per extent instead of 12, and each staging
  // slot's state region p | m (192 pages for a full tile instead of 288).
  const std::string nvme_zero =
      "stage: 3, sub_group_size: 100000, offload_optimizer: {device: nvme, nvme_path: /tmp, "
      "buffer_count: 4}";
  const MemoryEstimate nvme = Estimate(LoadYaml(BaseYaml(nvme_zero, lion), 2), 2);
  const MemoryEstimate nvme_adam = Estimate(LoadYaml(BaseYaml(nvme_zero), 2), 2);
  const int64_t tile_bytes = 98304 * 8;
  const int64_t last = kPsi / 2 - 4 * 98304;  // 75,648 elements
  EXPECT_EQ(ItemBytes(nvme, "fp32 master + exp_avg on NVMe (Lion)"),
            4 * tile_bytes + pages(8 * last));
  EXPECT_EQ(ItemBytes(nvme, "fp32 master + exp_avg + exp_avg_sq"), 0);
  EXPECT_EQ(FindItem(nvme, "optimizer staging ring")->bytes, 4 * (192 + 96 + 48) * 4096);
  EXPECT_LT(nvme.tier_bytes(kNvme), nvme_adam.tier_bytes(kNvme));
}

// Lamb keeps Adam's two fp32 moments: the same device bytes as Adam's, under its own name.
TEST(MemoryEstimateTest, LambKeepsTwoMoments) {
  const std::string lamb =
      "zero_allow_untested_optimizer: true\noptimizer: {type: Lamb, params: {lr: 1.0e-3}}\n";
  const int64_t shard = Shard(2);
  const MemoryEstimate device = Estimate(LoadYaml(BaseYaml("stage: 2", lamb), 2), 2);
  EXPECT_EQ(ItemBytes(device, "Lamb exp_avg + exp_avg_sq (fp32)"), 8 * shard);
  EXPECT_EQ(device.bytes(kDevice, kOptimizer), 12 * shard);
  const MemoryEstimate adam = Estimate(LoadYaml(BaseYaml("stage: 2"), 2), 2);
  EXPECT_EQ(adam.bytes(kDevice, kOptimizer), device.bytes(kDevice, kOptimizer));
}

// A Lion config whose state would stay on a cuda device is refused naming the keys (Sluice has
// no Lion kernel for it yet), as is a partial offload ratio.
TEST(MemoryEstimateTest, LionWhereItCannotRunIsRefused) {
  std::string yaml = BaseYaml("stage: 2", "optimizer: {type: Lion}\n");
  yaml.replace(yaml.find("type: cpu"), 9, "type: cuda");
  Result<MemoryEstimate> cuda = EstimateMemory(LoadYaml(yaml, 2), 2);
  ASSERT_FALSE(cuda.ok());
  EXPECT_NE(cuda.status().message().find("optimizer.type Lion"), std::string::npos)
      << cuda.status().ToString();
  EXPECT_NE(cuda.status().message().find("offload_optimizer.device"), std::string::npos)
      << cuda.status().ToString();
  // A partial offload with Lion never reaches the estimator: the config refuses it as it loads.
  ConfigSources sources;
  sources.env.emplace();
  sources.world_size = 2;
  Result<Config> partial =
      LoadConfigFromText(BaseYaml("stage: 3, offload_optimizer: {device: cpu, ratio: 0.5}",
                                  "optimizer: {type: Lion}\n"),
                         ConfigFormat::kYaml, sources);
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().message().find("offload_optimizer.ratio"), std::string::npos)
      << partial.status().ToString();
}

TEST(MemoryEstimateTest, NvmeOffloadSwapsThroughPinnedBuffers) {
  const Config config = LoadYaml(
      BaseYaml("stage: 3, sub_group_size: 100000, offload_optimizer: {device: nvme, nvme_path: "
               "/tmp, buffer_count: 4}, offload_param: {device: nvme, nvme_path: /tmp, "
               "buffer_count: 3, buffer_size: 100000, max_in_cpu: 200000}"),
      2);
  const MemoryEstimate e = Estimate(config, 2);
  const int64_t shard = kPsi / 2;  // 468,864: every parameter has an even element count
  ASSERT_EQ(e.shard_elements, shard);
  // Optimizer: tiles of sub_group_size rounded down to 2048 elements = 98,304 (4 full + 75,648),
  // one extent of 12 B per element each, rounded up to 4 KiB blocks: 1,179,648 B (288 blocks) and
  // 907,776 B -> 222 blocks. The gradient shard stays in host memory.
  constexpr int64_t kMiB = 1 << 20;
  const int64_t state = (4 * 288 + 222) * 4096;  // 5,627,904 B
  EXPECT_EQ(ItemBytes(e, "fp32 master + exp_avg + exp_avg_sq on NVMe"), state);
  // Its swap file, as the store lays it out and grows it (docs/swap_format.md): 2 MiB before the
  // data (two header slots for 4096 extents), the extents in whole 1 MiB stripe rows (6 MiB), and
  // the lock file's block. That is what the disk must hold.
  EXPECT_EQ(e.bytes(kNvme, kOptimizer), state);  // what the engine's ledger charges
  EXPECT_EQ(ItemBytes(e, "optimizer swap file around that state"),
            2 * kMiB + (6 * kMiB - state) + 4096);
  EXPECT_EQ(FindItem(e, "optimizer swap file around that state")->category, kBuffers);
  EXPECT_EQ(e.optimizer_swap_bytes, 8 * kMiB + 4096);
  EXPECT_EQ(e.bytes(kNvme, kGrads), 0);
  EXPECT_EQ(e.bytes(kHost, kGrads), 458 * 4096);  // 4 B x 468,864, whole pages
  EXPECT_EQ(e.bytes(kDevice, kOptimizer), 0);
  // Each of the 4 staging slots: the tile's state (288 pages), fp32 gradients (96), bf16 (48).
  EXPECT_EQ(FindItem(e, "optimizer staging ring")->bytes, 4 * (288 + 96 + 48) * 4096);
  // Parameters, as the NVMe parameter store places them: one extent per group of this rank's
  // pieces (2 B each, whole 4 KiB blocks): the persistent run (threshold 1000: per block 1,664
  // elements of biases and norms, ln_f 256; halved: 3,456 -> 2 blocks), the embeddings
  // (144,384 / 2 = 72,192 -> 36 blocks) and 4 blocks of 196,608 / 2 = 98,304 (48 blocks each).
  const int64_t shard_bytes = (2 + 36 + 4 * 48) * 4096;  // 942,080 B: one 1 MiB row
  EXPECT_EQ(e.bytes(kNvme, kParams), shard_bytes);
  EXPECT_EQ(e.param_swap_bytes, 2 * kMiB + kMiB + 4096);
  EXPECT_EQ(e.bytes(kNvme, kBuffers),
            2 * 2 * kMiB + (6 * kMiB - state) + (kMiB - shard_bytes) + 2 * 4096);
  EXPECT_EQ(e.tier_bytes(kNvme), 11 * kMiB + 2 * 4096);
  // Staging: buffer_count slots of the largest group, pinned.
  EXPECT_EQ(FindItem(e, "parameter swap buffers")->bytes, 3 * 48 * 4096);
  EXPECT_EQ(FindItem(e, "parameter swap buffers")->tier, kPinned);
  // Cached in pageable host memory in first-read order while within max_in_cpu 200,000: the
  // persistent run, the embeddings and the first block (173,952 elements).
  EXPECT_EQ(e.bytes(kHost, kParams), (2 + 36 + 48) * 4096);
  EXPECT_EQ(e.bytes(kPinned, kParams), 0);
  // The device holds only the gathered and the persistent parameters.
  EXPECT_EQ(e.bytes(kDevice, kParams),
            ItemBytes(e, "gathered parameters") + ItemBytes(e, "persistent parameters"));
}

TEST(MemoryEstimateTest, NvmeParameterBufferSmallerThanAUnitIsRefused) {
  const Config config =
      LoadYaml(BaseYaml("stage: 3, offload_optimizer: {device: cpu}, offload_param: {device: nvme, "
                        "nvme_path: /tmp, buffer_size: 50000}"),
               2);
  Result<MemoryEstimate> e = EstimateMemory(config, 2, {});
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("offload_param.buffer_size"), std::string::npos)
      << e.status().ToString();
}

TEST(MemoryEstimateTest, PartialOffloadKeepsPartOfTheShardOnTheDevice) {
  // The split is in whole optimizer tiles (DeepSpeed's sub-groups): 15 tiles of 32,768 elements,
  // the first floor(0.75 x 15) = 11 on the device. The device part reads the whole fp32
  // gradient shard on the device; the offloaded part copies its tiles off itself.
  const Config config = LoadYaml(
      BaseYaml("stage: 3, sub_group_size: 32768, offload_optimizer: {device: cpu, ratio: 0.25}"),
      2);
  const MemoryEstimate e = Estimate(config, 2);
  const int64_t shard = Shard(2);
  const int64_t on_device = 11 * 32768;
  const int64_t on_cpu = shard - on_device;
  const auto pages = [](int64_t bytes) { return (bytes + 4095) / 4096 * 4096; };
  EXPECT_EQ(e.bytes(kHost, kOptimizer), 3 * pages(4 * on_cpu));
  EXPECT_EQ(e.bytes(kDevice, kOptimizer), 12 * on_device);
  EXPECT_EQ(e.bytes(kDevice, kGrads), 4 * shard + ItemBytes(e, "unit gradient buffers"));
  EXPECT_EQ(e.bytes(kHost, kGrads), 0);
}

TEST(MemoryEstimateTest, ActivationCheckpointingAndMicroBatchScaleTheActivations) {
  const Config config = LoadYaml(BaseYaml("stage: 2"), 2);
  const MemoryEstimate plain = Estimate(config, 2);
  const MemoryEstimate checkpointed = Estimate(config, 2, {.activation_checkpointing = true});
  EXPECT_LT(checkpointed.bytes(kDevice, kActivations), plain.bytes(kDevice, kActivations) / 2);
  Config doubled = config;
  doubled.batch.micro_batch_per_gpu *= 2;
  EXPECT_EQ(Estimate(doubled, 2).bytes(kDevice, kActivations),
            2 * plain.bytes(kDevice, kActivations));
  EXPECT_EQ(Estimate(doubled, 2).bytes(kDevice, kOptimizer), plain.bytes(kDevice, kOptimizer));
}

TEST(MemoryEstimateTest, RefusesAConfigWithoutAModel) {
  Config config = LoadYaml("train_micro_batch_size_per_gpu: 1\n");
  ASSERT_FALSE(config.model.present);
  Result<MemoryEstimate> e = EstimateMemory(config, 1);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("no model section"), std::string::npos);
  EXPECT_NE(e.status().message().find("--model FILE"), std::string::npos);
}

// What the engine cannot run although the config is valid: Lamb on a cuda device (no kernel),
// and no ranks. (Settings are validated once, as the config loads: config_errors_test.)
TEST(MemoryEstimateTest, RefusesWhatTheEngineCannotRun) {
  const Config base = LoadYaml(BaseYaml("stage: 0"));
  std::string lamb = BaseYaml("stage: 0", "optimizer: {type: Lamb}\n");
  lamb.replace(lamb.find("type: cpu"), 9, "type: cuda");
  Result<MemoryEstimate> on_cuda = EstimateMemory(LoadYaml(lamb), 1);
  EXPECT_EQ(on_cuda.status().code(), StatusCode::kUnimplemented) << on_cuda.status().ToString();
  EXPECT_NE(on_cuda.status().message().find("optimizer.type Lamb"), std::string::npos);
  EXPECT_EQ(EstimateMemory(base, 0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::estimate
