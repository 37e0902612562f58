// The stage-3 gathers' plan (engine/zero/gather_plan.h): each run's unpacking list, uploaded with
// the others in one array, moves through the cpu column's CopySegments exactly what the host
// function UnpackGathered moves (a tag header per rank piece; f32, bf16 and f16 widened), into
// the run's dense buffer as the coordinator lays it out, for one rank and for ranks of three.
#include "engine/zero/gather_plan.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "engine/model/model.h"
#include "engine/zero/device_segments.h"
#include "engine/zero/partition_copy.h"
#include "offload/dtype_convert.h"
#include "tests/common/test_ops.h"
#include "zero_test_util.h"

namespace sluice::zero::testing {
namespace {

// The runs of a stage-3 layout as the coordinator forms them (each unit's gathered partitions,
// then the persistent ones), and where each parameter starts in its run's dense buffer.
struct Runs {
  std::vector<std::vector<int>> runs;
  std::vector<int64_t> dense_numel;
  std::vector<int64_t> dense_offset;
};

Runs RunsOf(const ShardLayout& layout, size_t params) {
  Runs out;
  out.dense_offset.assign(params, -1);
  const auto add = [&](const std::vector<int>& run) {
    int64_t offset = 0;
    for (int index : run) {
      const PartitionInfo& p = layout.partitions()[static_cast<size_t>(index)];
      out.dense_offset[static_cast<size_t>(p.param)] = offset;
      offset += p.numel;
    }
    out.runs.push_back(run);
    out.dense_numel.push_back(offset);
  };
  for (const UnitShards& unit : layout.units()) {
    if (!unit.gathered.empty()) add(unit.gathered);
  }
  add(layout.persistent());
  return out;
}

TEST(GatherPlan, UnpacksWhatUnpackGatheredUnpacks) {
  model::HostAllocator host;
  auto net = model::Model<float>::Create(TinyGpt(), host, sluice::testing::OpsFor<float>(),
                                         model::ModelStorage::kExternal);
  ASSERT_TRUE(net.ok());
  const model::ParameterRegistry& registry = (*net)->registry();
  ops::OpsBackend& ops = sluice::testing::OpsFor<float>();
  Device& device = ops.device();
  auto stream = device.CreateStream();
  ASSERT_TRUE(stream.ok());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  const auto on_device = [&](const void* bytes, size_t size) {
    auto buffer = device.Allocate(size, MemoryCategory::kBuffers);
    SLUICE_CHECK(buffer.ok());
    SLUICE_CHECK(device.CopyAsync(buffer->data(), bytes, size, CopyKind::kH2D, **stream).ok());
    return std::move(buffer).value();
  };
  constexpr int64_t kHeader = 1;
  for (const ShardLayout& layout :
       {ShardLayout::Build(registry, 1, 0, 100), ShardLayout::Build(registry, 3, 0, 100),
        ShardLayout::Build(registry, 3, 2, 100)}) {
    const Runs runs = RunsOf(layout, registry.parameters().size());
    ASSERT_GE(runs.runs.size(), 3u);
    ASSERT_FALSE(runs.runs.back().empty()) << "the threshold keeps some parameters persistent";
    std::vector<std::vector<ops::CopySegment>> lists;
    for (const std::vector<int>& run : runs.runs) {
      lists.push_back(UnpackGatheredSegments(layout, run, kHeader, runs.dense_offset));
    }
    auto plan = GatherPlan::Create(**stream, lists, static_cast<int>(lists.size()), layout.world());
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    for (int r = 0; r < layout.world(); ++r) EXPECT_EQ((*plan)->received()[r], 0u);
    for (size_t i = 0; i < runs.runs.size(); ++i) {
      const std::vector<int>& run = runs.runs[i];
      const int64_t dense_n = runs.dense_numel[i];
      const int64_t gathered_n = (kHeader + RunElements(layout, run)) * layout.world();
      for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
        std::vector<float> values(static_cast<size_t>(gathered_n));
        for (float& v : values) v = uniform(rng);
        std::vector<uint8_t> gathered(static_cast<size_t>(gathered_n) * DTypeSize(dtype));
        offload::ConvertFromF32(values.data(), gathered.data(), dtype, gathered_n, 1);
        std::vector<float> want(static_cast<size_t>(dense_n), 5.0f), have(want);
        UnpackGathered(
            layout, run, gathered.data(), dtype,
            [&](const PartitionInfo& p) {
              return want.data() + runs.dense_offset[static_cast<size_t>(p.param)];
            },
            kHeader);
        DeviceBuffer from = on_device(gathered.data(), gathered.size());
        DeviceBuffer into = on_device(have.data(), have.size() * sizeof(float));
        ASSERT_TRUE(ops.CopySegments(
                           **stream, Tensor(from.data(), dtype, {gathered_n}, MemoryTier::kDevice),
                           Tensor(into.data(), DType::kF32, {dense_n}, MemoryTier::kDevice),
                           (*plan)->unpack(static_cast<int>(i)))
                        .ok());
        ASSERT_TRUE(device
                        .CopyAsync(have.data(), into.data(), have.size() * sizeof(float),
                                   CopyKind::kD2H, **stream)
                        .ok());
        ASSERT_TRUE((*stream)->Synchronize().ok());
        EXPECT_EQ(have, want) << "run " << i << ", " << DTypeName(dtype) << ", rank "
                              << layout.rank() << " of " << layout.world();
      }
    }
  }
}

}  // namespace
}  // namespace sluice::zero::testing
