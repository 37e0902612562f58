// The ZeRO shard layout (DeepSpeed's per-parameter partitioning and padding), the copies around
// the coalesced collectives, and the sharded gradient norm. No communicator: the collectives are
// simulated by concatenating or summing what each rank would contribute.
#include "engine/zero/shard_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "engine/model/model.h"
#include "engine/train/grad_clip.h"
#include "engine/zero/device_segments.h"
#include "engine/zero/partition_copy.h"
#include "engine/zero/shard_grad_norm.h"
#include "engine/zero/shard_norm_plan.h"
#include "kernels/ref/half.h"
#include "tests/common/test_ops.h"
#include "zero_test_util.h"

namespace sluice::zero::testing {
namespace {

// Units of odd sizes: a parameter smaller than the world, one of a single element, a tied alias.
model::ParameterRegistry OddRegistry() {
  model::ParameterRegistry r;
  r.BeginUnit("embeddings");
  const int wte = r.Add("wte", Shape({7, 3}), model::InitKind::kNormal);  // 21
  r.Add("tiny", Shape({2}), model::InitKind::kZeros);                     // 2
  r.BeginUnit("block");
  r.Add("w", Shape({10}), model::InitKind::kNormal);   // 10
  r.Add("b", Shape({1}), model::InitKind::kZeros);     // 1
  r.Add("w2", Shape({12}), model::InitKind::kNormal);  // 12
  r.BeginUnit("head");
  r.AddAlias("head.weight", wte);
  return r;
}

TEST(ShardLayout, PartitionsLikeDeepSpeed) {
  const model::ParameterRegistry registry = OddRegistry();
  for (int world = 1; world <= 5; ++world) {
    std::vector<ShardLayout> layouts;
    for (int rank = 0; rank < world; ++rank) {
      layouts.push_back(ShardLayout::Build(registry, world, rank, -1));
    }
    for (size_t i = 0; i < layouts[0].partitions().size(); ++i) {
      const PartitionInfo& p = layouts[0].partitions()[i];
      // partition_parameters.py: ceil(numel / ws) per rank, padding (ws - numel % ws) % ws.
      EXPECT_EQ(p.partition, (p.numel + world - 1) / world);
      int64_t owned_total = 0;
      int64_t padding = 0;
      for (int rank = 0; rank < world; ++rank) {
        const PartitionInfo& q = layouts[static_cast<size_t>(rank)].partitions()[i];
        EXPECT_EQ(q.shard_offset, p.shard_offset) << "same offset on every rank";
        const ShardSpan owned = layouts[static_cast<size_t>(rank)].Owned(q);
        EXPECT_EQ(static_cast<int64_t>(owned.offset), std::min(p.numel, rank * p.partition));
        owned_total += static_cast<int64_t>(owned.count);
        padding += p.partition - static_cast<int64_t>(owned.count);
        if (rank + 1 < world && owned.count < static_cast<size_t>(p.partition)) {
          // Only the last ranks pad: every later rank owns nothing more.
          for (int later = rank + 1; later < world; ++later) {
            EXPECT_EQ(layouts[static_cast<size_t>(later)].Owned(q).count, 0u);
          }
        }
      }
      EXPECT_EQ(owned_total, p.numel);
      EXPECT_EQ(padding, (world - p.numel % world) % world) << "param " << p.param;
    }
    for (const ShardLayout& layout : layouts) {
      EXPECT_EQ(layout.shard_elements(), layouts[0].shard_elements());
      EXPECT_EQ(layout.total_elements(), 46);
    }
  }
}

TEST(ShardLayout, SmallParameterOnManyRanks) {
  const model::ParameterRegistry registry = OddRegistry();
  // "tiny" has 2 elements: on 4 ranks ranks 0 and 1 own one each, ranks 2 and 3 only padding.
  const int tiny = *registry.Find("tiny");
  for (int rank = 0; rank < 4; ++rank) {
    const ShardLayout layout = ShardLayout::Build(registry, 4, rank, -1);
    const PartitionInfo& p = layout.PartitionOf(tiny);
    EXPECT_EQ(p.partition, 1);
    EXPECT_EQ(layout.Owned(p).count, rank < 2 ? 1u : 0u);
  }
}

TEST(ShardLayout, PersistentParametersGoLastAndUnitsGatherContiguousRuns) {
  const model::ParameterRegistry registry = OddRegistry();
  const ShardLayout layout = ShardLayout::Build(registry, 3, 1, /*persistence_threshold=*/2);
  // tiny (2) and b (1) are persistent: one run at the end, in registry order.
  ASSERT_EQ(layout.persistent().size(), 2u);
  EXPECT_EQ(layout.partitions()[static_cast<size_t>(layout.persistent()[0])].param,
            *registry.Find("tiny"));
  EXPECT_EQ(layout.partitions()[static_cast<size_t>(layout.persistent()[1])].param,
            *registry.Find("b"));
  EXPECT_EQ(layout.persistent_numel(), 3);
  EXPECT_EQ(layout.persistent_elements(), 2);  // ceil(2/3) + ceil(1/3)
  EXPECT_EQ(layout.persistent_offset() + layout.persistent_elements(), layout.shard_elements());
  for (const PartitionInfo& p : layout.partitions()) {
    EXPECT_EQ(p.persistent, p.numel <= 2);
  }
  // Each unit's non-persistent partitions are consecutive and start where its gather starts.
  const UnitShards& block = layout.units()[1];
  ASSERT_EQ(block.gathered.size(), 2u);  // w and w2, not b
  EXPECT_EQ(block.gathered_numel, 22);
  EXPECT_EQ(block.gather_elements, 4 + 4);
  EXPECT_EQ(layout.partitions()[static_cast<size_t>(block.gathered[0])].shard_offset,
            block.gather_offset);
  EXPECT_EQ(block.all.size(), 3u);
  // The tied head owns nothing and reads the embeddings.
  EXPECT_TRUE(layout.units()[2].all.empty());
  EXPECT_EQ(layout.PartitionOf(*registry.Find("head.weight")).param, *registry.Find("wte"));
  const auto reads = StorageUnitsReadBy(registry);
  EXPECT_EQ(reads[2], std::vector<int>({0}));
  EXPECT_EQ(reads[1], std::vector<int>({1}));
}

// Every rank's shard of a known full buffer, in `dtype`.
std::vector<std::vector<uint8_t>> Shards(const model::ParameterRegistry& registry, int world,
                                         const std::vector<float>& full, DType dtype,
                                         int64_t threshold) {
  std::vector<std::vector<uint8_t>> shards;
  for (int rank = 0; rank < world; ++rank) {
    const ShardLayout layout = ShardLayout::Build(registry, world, rank, threshold);
    std::vector<uint8_t> shard(static_cast<size_t>(layout.shard_elements()) * DTypeSize(dtype), 0);
    for (const PartitionInfo& p : layout.partitions()) {
      const ShardSpan owned = layout.Owned(p);
      offload::ConvertFromF32(full.data() + p.full_offset + owned.offset,
                              shard.data() + static_cast<size_t>(p.shard_offset) * DTypeSize(dtype),
                              dtype, static_cast<int64_t>(owned.count), 1);
    }
    shards.push_back(std::move(shard));
  }
  return shards;
}

TEST(PartitionCopy, GatheredRunsUnpackToTheFullParameters) {
  const model::ParameterRegistry registry = OddRegistry();
  std::vector<float> full(46);
  std::iota(full.begin(), full.end(), 1.0f);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int world : {1, 2, 3, 4}) {
      const auto shards = Shards(registry, world, full, dtype, 2);
      const ShardLayout layout = ShardLayout::Build(registry, world, 0, 2);
      const size_t size = DTypeSize(dtype);
      // What an all-gather of unit 1's run yields: every rank's piece, rank-major.
      const UnitShards& unit = layout.units()[1];
      std::vector<uint8_t> gathered;
      for (int rank = 0; rank < world; ++rank) {
        const uint8_t* piece = shards[static_cast<size_t>(rank)].data() +
                               static_cast<size_t>(unit.gather_offset) * size;
        gathered.insert(gathered.end(), piece,
                        piece + static_cast<size_t>(unit.gather_elements) * size);
      }
      std::vector<float> out(46, -1.0f);
      UnpackGathered(layout, unit.gathered, gathered.data(), dtype,
                     [&out](const PartitionInfo& p) { return out.data() + p.full_offset; });
      for (const char* name : {"w", "w2"}) {
        const model::ParameterInfo& info = registry.parameter(*registry.Find(name));
        for (int64_t e = 0; e < info.numel; ++e) {
          // Small integers are exact in bf16 and f16.
          EXPECT_EQ(out[static_cast<size_t>(info.offset + e)],
                    full[static_cast<size_t>(info.offset + e)])
              << name << " " << e << " world " << world;
        }
      }
      EXPECT_EQ(out[static_cast<size_t>(registry.parameter(*registry.Find("b")).offset)], -1.0f)
          << "a persistent parameter is not part of the unit's run";
    }
  }
}

TEST(PartitionCopy, ReduceScatterPiecesAccumulateIntoEachRanksShard) {
  const model::ParameterRegistry registry = OddRegistry();
  const int world = 3;
  // Rank r's full gradient: (r + 1) * (i + 1). The sum over ranks: 6 * (i + 1).
  std::vector<std::vector<float>> grads(world, std::vector<float>(46));
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < 46; ++i) grads[static_cast<size_t>(r)][i] = (r + 1.0f) * (i + 1.0f);
  }
  const ShardLayout layout0 = ShardLayout::Build(registry, world, 0, -1);
  // A bucket in backward order: w2, b, w of the block, then tiny, wte.
  const std::vector<int> run = {4, 3, 2, 1, 0};
  const int64_t piece = RunElements(layout0, run);
  EXPECT_EQ(piece, 4 + 1 + 4 + 1 + 7);
  std::vector<float> summed(static_cast<size_t>(piece * world), 0.0f);
  for (int r = 0; r < world; ++r) {
    std::vector<float> bucket(summed.size(), -7.0f);
    PackForReduceScatter(
        layout0, run,
        [&](const PartitionInfo& p) {
          return grads[static_cast<size_t>(r)].data() + p.full_offset;
        },
        bucket.data());
    for (size_t i = 0; i < bucket.size(); ++i) summed[i] += bucket[i];
  }
  for (int rank = 0; rank < world; ++rank) {
    const ShardLayout layout = ShardLayout::Build(registry, world, rank, -1);
    std::vector<float> shard(static_cast<size_t>(layout.shard_elements()), 1.0f);
    AccumulateIntoShard(layout, run, summed.data() + rank * piece, shard.data());
    for (const PartitionInfo& p : layout.partitions()) {
      const ShardSpan owned = layout.Owned(p);
      for (int64_t e = 0; e < p.partition; ++e) {
        const float got = shard[static_cast<size_t>(p.shard_offset + e)];
        if (e < static_cast<int64_t>(owned.count)) {
          const int64_t flat = p.full_offset + static_cast<int64_t>(owned.offset) + e;
          EXPECT_EQ(got, 1.0f + 6.0f * (flat + 1.0f)) << "rank " << rank << " flat " << flat;
        } else {
          EXPECT_EQ(got, 1.0f) << "padding receives zeros";
        }
      }
    }
  }
}

// A model big enough for several 8192-element norm blocks, parameters external.
std::unique_ptr<model::Model<float>> NormTestModel() {
  model::ModelOptions options = TinyGpt();
  options.d_model = 64;
  options.d_ff = 256;
  static model::HostAllocator host;
  auto net = model::Model<float>::Create(options, host, sluice::testing::OpsFor<float>(),
                                         model::ModelStorage::kExternal);
  SLUICE_CHECK(net.ok()) << net.status().ToString();
  return std::move(net).value();
}

TEST(ShardGradNorm, OneRankSumsLikeTheReferenceNorm) {
  const auto net = NormTestModel();
  const model::ParameterRegistry& registry = net->registry();
  const int64_t n = registry.total_elements();
  ASSERT_GT(n, 4 * kNormBlock);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1e-2f);
  std::vector<float> grads(static_cast<size_t>(n));
  for (float& g : grads) g = normal(rng);

  const train::GradNorm trainer = train::GlobalGradNorm(grads.data(), n, 1.0, 2);
  // Persistent parameters reorder the shard; the sum still follows the flat order.
  const ShardLayout one = ShardLayout::Build(registry, 1, 0, 100);
  std::vector<float> shard(static_cast<size_t>(one.shard_elements()), 0.0f);
  ExtractOwned(one, grads.data(), shard.data());
  const double squared = LocalSquaredSum(one, shard.data());
  EXPECT_EQ(std::sqrt(squared), trainer.norm) << "bitwise with one rank";

  double over_ranks = 0.0;
  for (int rank = 0; rank < 3; ++rank) {
    const ShardLayout layout = ShardLayout::Build(registry, 3, rank, -1);
    std::vector<float> part(static_cast<size_t>(layout.shard_elements()), 123.0f);
    std::fill(part.begin(), part.end(), 0.0f);
    ExtractOwned(layout, grads.data(), part.data());
    over_ranks += LocalSquaredSum(layout, part.data());
  }
  EXPECT_NEAR(std::sqrt(over_ranks), trainer.norm, 1e-12 * trainer.norm);

  shard[17] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(std::isfinite(LocalSquaredSum(one, shard.data())));
}

// The device path of the norm: the blocks as pieces, summed by the cpu column on a stream, added
// in block order on the host: LocalSquaredSum's bits for one rank (persistent parameters
// reordering the shard) and for each of three ranks (partitions split between ranks, padding).
TEST(ShardGradNorm, ThePlanOnTheDeviceSumsLikeTheHost) {
  const auto net = NormTestModel();
  const model::ParameterRegistry& registry = net->registry();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1e-2f);
  std::vector<float> grads(static_cast<size_t>(registry.total_elements()));
  for (float& g : grads) g = normal(rng);
  ops::OpsBackend& ops = sluice::testing::OpsFor<float>();
  Device& device = ops.device();
  auto stream = device.CreateStream();
  ASSERT_TRUE(stream.ok());
  for (const ShardLayout& layout :
       {ShardLayout::Build(registry, 1, 0, 100), ShardLayout::Build(registry, 3, 0, -1),
        ShardLayout::Build(registry, 3, 1, -1), ShardLayout::Build(registry, 3, 2, -1)}) {
    std::vector<float> shard(static_cast<size_t>(layout.shard_elements()), 0.0f);
    ExtractOwned(layout, grads.data(), shard.data());
    auto on_device = device.Allocate(shard.size() * sizeof(float), MemoryCategory::kGrads);
    ASSERT_TRUE(on_device.ok());
    ASSERT_TRUE(device
                    .CopyAsync(on_device->data(), shard.data(), shard.size() * sizeof(float),
                               CopyKind::kH2D, **stream)
                    .ok());
    auto plan = ShardNormPlan::Create(**stream, layout);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_GT(BuildNormBlocks(layout).blocks(), 1);
    Result<double> sum = (*plan)->LocalSquaredSum(ops, **stream, on_device->data_as<float>());
    ASSERT_TRUE(sum.ok()) << sum.status().ToString();
    EXPECT_EQ(*sum, LocalSquaredSum(layout, shard.data())) << "rank " << layout.rank();
  }
}

// The offloaded optimizer's host shard: the blocks summed in parallel, each block in order on one
// thread, the block sums in block order: LocalSquaredSum's bits at any thread count.
TEST(ShardGradNorm, TheParallelHostSumSumsLikeTheSerialOne) {
  const auto net = NormTestModel();
  const model::ParameterRegistry& registry = net->registry();
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1e-2f);
  std::vector<float> grads(static_cast<size_t>(registry.total_elements()));
  for (float& g : grads) g = normal(rng);
  for (const ShardLayout& layout :
       {ShardLayout::Build(registry, 1, 0, 100), ShardLayout::Build(registry, 3, 0, -1),
        ShardLayout::Build(registry, 3, 2, -1)}) {
    std::vector<float> shard(static_cast<size_t>(layout.shard_elements()), 0.0f);
    ExtractOwned(layout, grads.data(), shard.data());
    const NormBlocks blocks = BuildNormBlocks(layout);
    ASSERT_GT(blocks.blocks(), 1);
    const double serial = LocalSquaredSum(layout, shard.data());
    for (int threads : {0, 1, 2, 3, 7}) {
      EXPECT_EQ(HostSquaredSum(blocks, shard.data(), threads), serial)
          << "rank " << layout.rank() << ", " << threads << " threads";
    }
    shard[shard.size() / 2] = std::numeric_limits<float>::infinity();
    EXPECT_FALSE(std::isfinite(HostSquaredSum(blocks, shard.data(), 2)));
  }
}

// The device segment lists move what the host functions move, element for element: ExtractOwned,
// UnpackGathered (f32 and bf16 gathered, with a header), PackForReduceScatter and
// AccumulateIntoShard through the cpu column's CopySegments and AccumulateSegments, for one rank
// and each of three.
TEST(DeviceSegments, MoveWhatTheHostFunctionsMove) {
  model::ModelOptions options = TinyGpt();
  model::HostAllocator host;
  auto net = model::Model<float>::Create(options, host, sluice::testing::OpsFor<float>(),
                                         model::ModelStorage::kExternal);
  ASSERT_TRUE(net.ok());
  const model::ParameterRegistry& registry = (*net)->registry();
  const int64_t total = registry.total_elements();
  ops::OpsBackend& ops = sluice::testing::OpsFor<float>();
  Device& device = ops.device();
  auto stream = device.CreateStream();
  ASSERT_TRUE(stream.ok());
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const auto random = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = uniform(rng);
    return v;
  };
  // `bytes` on the device, then back after `op` ran on the stream.
  const auto on_device = [&](const void* bytes, size_t size) {
    auto buffer = device.Allocate(size, MemoryCategory::kBuffers);
    SLUICE_CHECK(buffer.ok());
    SLUICE_CHECK(device.CopyAsync(buffer->data(), bytes, size, CopyKind::kH2D, **stream).ok());
    return std::move(buffer).value();
  };
  const auto to_host = [&](const DeviceBuffer& buffer, void* bytes, size_t size) {
    ASSERT_TRUE(device.CopyAsync(bytes, buffer.data(), size, CopyKind::kD2H, **stream).ok());
    ASSERT_TRUE((*stream)->Synchronize().ok());
  };
  for (const ShardLayout& layout :
       {ShardLayout::Build(registry, 1, 0, 100), ShardLayout::Build(registry, 3, 0, -1),
        ShardLayout::Build(registry, 3, 2, -1)}) {
    const std::vector<float> full = random(total);
    const int64_t shard_n = layout.shard_elements();
    std::vector<float> expected(static_cast<size_t>(shard_n), 7.0f), got(expected);
    ExtractOwned(layout, full.data(), expected.data());
    DeviceBuffer src = on_device(full.data(), full.size() * sizeof(float));
    DeviceBuffer dst = on_device(got.data(), got.size() * sizeof(float));
    auto extract = DeviceSegments::Create(**stream, ExtractOwnedSegments(layout), "extract");
    ASSERT_TRUE(extract.ok()) << extract.status().ToString();
    ASSERT_TRUE(ops.CopySegments(**stream,
                                 Tensor(src.data(), DType::kF32, {total}, MemoryTier::kDevice),
                                 Tensor(dst.data(), DType::kF32, {shard_n}, MemoryTier::kDevice),
                                 (*extract)->list())
                    .ok());
    to_host(dst, got.data(), got.size() * sizeof(float));
    EXPECT_EQ(got, expected) << "ExtractOwned, rank " << layout.rank();

    std::vector<int> run(layout.partitions().size());
    std::iota(run.begin(), run.end(), 0);
    const int64_t header = 1;
    const int64_t gathered_n = (header + RunElements(layout, run)) * layout.world();
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      const std::vector<float> values = random(gathered_n);
      std::vector<uint8_t> gathered(static_cast<size_t>(gathered_n) * DTypeSize(dtype));
      offload::ConvertFromF32(values.data(), gathered.data(), dtype, gathered_n, 1);
      std::vector<float> want(static_cast<size_t>(total), 5.0f), have(want);
      UnpackGathered(
          layout, run, gathered.data(), dtype,
          [&want](const PartitionInfo& p) { return want.data() + p.full_offset; }, header);
      DeviceBuffer from = on_device(gathered.data(), gathered.size());
      DeviceBuffer into = on_device(have.data(), have.size() * sizeof(float));
      auto unpack =
          DeviceSegments::Create(**stream, UnpackGatheredSegments(layout, run, header), "unpack");
      ASSERT_TRUE(unpack.ok()) << unpack.status().ToString();
      ASSERT_TRUE(ops.CopySegments(**stream,
                                   Tensor(from.data(), dtype, {gathered_n}, MemoryTier::kDevice),
                                   Tensor(into.data(), DType::kF32, {total}, MemoryTier::kDevice),
                                   (*unpack)->list())
                      .ok());
      to_host(into, have.data(), have.size() * sizeof(float));
      EXPECT_EQ(have, want) << "UnpackGathered " << DTypeName(dtype) << ", rank " << layout.rank();
    }

    // PackForReduceScatter from per-parameter gradients, then AccumulateIntoShard of a piece.
    const int64_t piece = RunElements(layout, run);
    std::vector<float> packed_want(static_cast<size_t>(piece * layout.world()), 3.0f);
    std::vector<float> packed_have(packed_want);
    PackForReduceScatter(
        layout, run, [&full](const PartitionInfo& p) { return full.data() + p.full_offset; },
        packed_want.data());
    DeviceBuffer grads = on_device(full.data(), full.size() * sizeof(float));
    DeviceBuffer packed = on_device(packed_have.data(), packed_have.size() * sizeof(float));
    const std::vector<std::vector<ops::CopySegment>> packs = PackSegments(layout, run);
    ASSERT_EQ(packs.size(), run.size());
    for (size_t i = 0; i < run.size(); ++i) {
      const PartitionInfo& p = layout.partitions()[static_cast<size_t>(run[i])];
      auto list = DeviceSegments::Create(**stream, packs[i], "pack");
      ASSERT_TRUE(list.ok());
      ASSERT_TRUE(ops.CopySegments(**stream,
                                   Tensor(grads.data_as<float>() + p.full_offset, DType::kF32,
                                          {p.numel}, MemoryTier::kDevice),
                                   Tensor(packed.data(), DType::kF32, {piece * layout.world()},
                                          MemoryTier::kDevice),
                                   (*list)->list())
                      .ok());
    }
    to_host(packed, packed_have.data(), packed_have.size() * sizeof(float));
    EXPECT_EQ(packed_have, packed_want) << "PackForReduceScatter, rank " << layout.rank();

    const std::vector<float> reduced = random(piece);
    std::vector<float> shard_want = random(shard_n), shard_have(shard_want);
    AccumulateIntoShard(layout, run, reduced.data(), shard_want.data());
    DeviceBuffer piece_on_device = on_device(reduced.data(), reduced.size() * sizeof(float));
    DeviceBuffer shard_on_device = on_device(shard_have.data(), shard_have.size() * sizeof(float));
    auto accumulate =
        DeviceSegments::Create(**stream, AccumulateIntoShardSegments(layout, run), "accumulate");
    ASSERT_TRUE(accumulate.ok());
    ASSERT_TRUE(ops.AccumulateSegments(
                       **stream,
                       Tensor(piece_on_device.data(), DType::kF32, {piece}, MemoryTier::kDevice),
                       Tensor(shard_on_device.data(), DType::kF32, {shard_n}, MemoryTier::kDevice),
                       (*accumulate)->list())
                    .ok());
    to_host(shard_on_device, shard_have.data(), shard_have.size() * sizeof(float));
    EXPECT_EQ(shard_have, shard_want) << "AccumulateIntoShard, rank " << layout.rank();
  }
}

TEST(ShardGradNorm, ClipCoefficientAsTorch) {
  EXPECT_EQ(ClipCoefficient(0.5, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(ClipCoefficient(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_EQ(ClipCoefficient(4.0, 0.0), 1.0);
  EXPECT_EQ(ClipCoefficient(std::numeric_limits<double>::infinity(), 1.0), 1.0);
}

TEST(PartitionCopy, RoundThroughF16Overflows) {
  std::vector<float> v = {1.0f, 65504.0f, 70000.0f, -1e6f, 1e-3f};
  RoundThrough(v.data(), static_cast<int64_t>(v.size()), DType::kF16, 1);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 65504.0f);
  EXPECT_TRUE(std::isinf(v[2]));
  EXPECT_TRUE(std::isinf(v[3]));
  EXPECT_EQ(v[4], kernels::F16ToF32(kernels::F32ToF16(1e-3f)));
}

}  // namespace
}  // namespace sluice::zero::testing
