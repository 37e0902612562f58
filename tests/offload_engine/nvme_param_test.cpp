// The NVMe parameter path below the engine (mpirun -np 1, 2): the NvmeParamStore (one extent per
// gather group plus the persistent run, tile-by-tile write-back, bounded pinned staging, the
// max_in_cpu cache) and the stage-3 coordinator gathering from it: bitwise the same gathers as
// from a host shard in f32 and bf16, a corrupted extent as DataLoss naming the unit, and reads
// issued ahead by the trace's prefetch.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/zero/offload_options.h"
#include "engine/zero/parameter_coordinator.h"
#include "engine/zero/partition_copy.h"
#include "kernels/ref/half.h"
#include "offload/aligned_buffer.h"
#include "offload/nvme_param_store.h"
#include "offload/offloaded_adam.h"
#include "offload/rank_tiers.h"
#include "offload/swap_format.h"
#include "offload_engine_test_util.h"
#include "runtime/check.h"
#include "runtime/device/device_factory.h"
#include "runtime/memory_accounting.h"
#include "tests/common/test_ops.h"
#include "tests/zero/zero_test_util.h"

namespace sluice::zero::testing {
namespace {

using ::testing::HasSubstr;

float Value(int64_t flat) { return 0.25f * static_cast<float>(flat % 4001) - 300.0f; }

// A tiny GPT's layout on this rank, its shard (in `dtype`) holding Value(flat index), and an
// NVMe parameter store in a scratch directory.
class NvmeParamRig {
 public:
  NvmeParamRig(DType dtype, int buffer_count, int64_t buffer_size, int64_t max_in_cpu,
               int64_t persistence = 64)
      : dtype_(dtype) {
    Comm& world = TestWorld();
    auto device = CreateDevice({.memory_limit_bytes = uint64_t{16} << 20});
    SLUICE_CHECK(device.ok());
    device_ = std::move(device).value();
    ops_ = sluice::testing::CpuOpsOn(*device_);
    auto model = model::Model<float>::Create(TinyGpt(), host_, sluice::testing::OpsFor<float>(),
                                             model::ModelStorage::kExternal);
    SLUICE_CHECK(model.ok());
    model_ = std::move(model).value();
    layout_ = ShardLayout::Build(registry(), world.size(), world.rank(), persistence);
    const size_t size = DTypeSize(dtype);
    shard_.assign(static_cast<size_t>(layout_.shard_elements()) * size, 0);
    for (const PartitionInfo& p : layout_.partitions()) {
      const ShardSpan owned = layout_.Owned(p);
      for (size_t e = 0; e < owned.count; ++e) {
        const float v = Value(p.full_offset + static_cast<int64_t>(owned.offset + e));
        uint8_t* at = shard_.data() + (static_cast<size_t>(p.shard_offset) + e) * size;
        if (dtype == DType::kF32) {
          std::memcpy(at, &v, 4);
        } else {
          const uint16_t half = kernels::F32ToBf16(v);
          std::memcpy(at, &half, 2);
        }
      }
    }
    offload::NvmeParamStoreOptions options;
    options.nvme_path = dir_.path();
    options.rank = world.rank();
    options.dtype = dtype;
    options.buffer_count = buffer_count;
    options.buffer_size = buffer_size;
    options.max_in_cpu = max_in_cpu;
    store_status_ = OkStatus();
    tiers_ = std::make_unique<offload::RankTiers>(offload::RankTiersOptions{.rank = world.rank()});
    auto store = offload::NvmeParamStore::Create(*device_, *tiers_, options,
                                                 NvmeParamGroupsOf(layout_, registry()));
    if (!store.ok()) {
      store_status_ = store.status();
      return;
    }
    store_ = std::move(store).value();
  }
  ~NvmeParamRig() {
    coordinator_.reset();
    queue_.reset();
    compute_.reset();
    store_.reset();
  }

  const model::ParameterRegistry& registry() const { return model_->registry(); }
  const ShardLayout& layout() const { return layout_; }
  const Status& store_status() const { return store_status_; }
  offload::NvmeParamStore& store() { return *store_; }
  Device& device() { return *device_; }
  const std::vector<uint8_t>& shard() const { return shard_; }
  // What an optimizer step does to the shard: every stored value changes.
  void ChangeShard() {
    for (uint8_t& byte : shard_) byte ^= 0x01;
  }
  int units() const { return static_cast<int>(registry().units().size()); }

  // Writes the shard to the store in tiles of `tile` elements, as an optimizer step would.
  Status WriteShard(int64_t tile) {
    const int64_t total = layout_.shard_elements();
    for (int64_t at = 0; at < total; at += tile) {
      SLUICE_RETURN_IF_ERROR(
          store_->WriteBack(at, std::min(tile, total - at),
                            shard_.data() + static_cast<size_t>(at) * DTypeSize(dtype_)));
    }
    return store_->FinishWriteBack();
  }

  // A coordinator over a fresh comm queue, gathering from the store or (nvme false) the shard.
  Status MakeCoordinator(bool nvme, int64_t prefetch_bucket_size = 1000000) {
    coordinator_.reset();
    queue_.reset();
    binding_ = std::make_unique<ZeroBinding>(registry());
    auto comm = TestWorld().Split(0, TestWorld().rank());
    SLUICE_RETURN_IF_ERROR(comm.status());
    SLUICE_ASSIGN_OR_RETURN(queue_,
                            CommQueue::Create(*device_, std::move(comm).value(), /*overlap=*/true));
    SLUICE_ASSIGN_OR_RETURN(compute_, device_->CreateStream());
    CoordinatorOptions options = CoordinatorOptionsOf(DefaultZeroOptions());
    options.param_dtype = dtype_;
    options.host_shard = true;  // shard_ (offload_param device cpu), when not reading NVMe
    options.budgets.prefetch_bucket_size = prefetch_bucket_size;
    SLUICE_ASSIGN_OR_RETURN(
        coordinator_,
        ParameterCoordinator::Create(options, registry(), layout_, *queue_, *compute_, *ops_,
                                     *binding_, shard_.data(), nvme ? store_.get() : nullptr));
    return coordinator_->GatherPersistent();
  }
  ParameterCoordinator& coordinator() { return *coordinator_; }

  std::vector<ModuleAccess> TrainOrder() const {
    std::vector<ModuleAccess> order;
    for (int u = 0; u < units(); ++u) order.push_back({u, Phase::kForward});
    for (int u = units() - 1; u >= 0; --u) order.push_back({u, Phase::kBackward});
    return order;
  }

  // One training pass; appends every value each access reads to `seen`. `after_fetch` runs
  // where the unit's compute would (its index in the pass).
  Status RunPass(std::vector<float>* seen, const std::function<void(size_t)>& after_fetch = {}) {
    const std::vector<ModuleAccess> order = TrainOrder();
    SLUICE_RETURN_IF_ERROR(coordinator_->BeginPass(PassKind::kTrain));
    for (size_t i = 0; i < order.size(); ++i) {
      SLUICE_RETURN_IF_ERROR(coordinator_->Fetch(order[i]));
      // Fetch only enqueues: the values are there once the compute stream reaches this point.
      SLUICE_RETURN_IF_ERROR(compute_->Synchronize());
      if (after_fetch) after_fetch(i);
      for (int p : registry().units()[static_cast<size_t>(order[i].unit)].params) {
        const float* values = binding_->Value(p);
        seen->insert(seen->end(), values, values + registry().parameter(p).numel);
      }
      SLUICE_RETURN_IF_ERROR(coordinator_->Release(order[i]));
    }
    return coordinator_->EndPass();
  }

 private:
  DType dtype_;
  ScratchDir dir_;
  model::HostAllocator host_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<ops::OpsBackend> ops_;
  std::unique_ptr<model::Model<float>> model_;
  ShardLayout layout_;
  std::vector<uint8_t> shard_;
  Status store_status_;
  std::unique_ptr<offload::RankTiers> tiers_;  // before the store, which borrows it
  std::unique_ptr<offload::NvmeParamStore> store_;
  std::unique_ptr<ZeroBinding> binding_;
  std::unique_ptr<CommQueue> queue_;
  std::unique_ptr<Stream> compute_;
  std::unique_ptr<ParameterCoordinator> coordinator_;
};

int64_t LargestGroup(const offload::NvmeParamStore& store) {
  int64_t largest = 0;
  for (const offload::NvmeParamGroup& g : store.groups()) largest = std::max(largest, g.elements);
  return largest;
}

class NvmeParamDtype : public ::testing::TestWithParam<DType> {};

TEST_P(NvmeParamDtype, WriteBackInTilesThenReadEveryGroupBitwise) {
  MemoryLedger::Global().ResetPeaks();
  const uint64_t pinned_before = MemoryLedger::Global()
                                     .Snapshot()
                                     .at(MemoryTier::kHostPinned, MemoryCategory::kBuffers)
                                     .current;
  const int64_t buffer_size = 16384;
  NvmeParamRig rig(GetParam(), /*buffer_count=*/2, buffer_size, /*max_in_cpu=*/0);
  ASSERT_TRUE(rig.store_status().ok()) << rig.store_status().ToString();
  // An odd tile straddles group boundaries; 2 slots force slot reuse while writes are in flight.
  ASSERT_TRUE(rig.WriteShard(777).ok());
  const size_t size = DTypeSize(GetParam());
  for (size_t g = 0; g < rig.store().groups().size(); ++g) {
    const offload::NvmeParamGroup& group = rig.store().groups()[g];
    offload::NvmeParamRead read = rig.store().BeginRead(static_cast<int>(g));
    Result<const void*> values = rig.store().AwaitRead(read);
    ASSERT_TRUE(values.ok()) << values.status().ToString();
    EXPECT_EQ(std::memcmp(*values, rig.shard().data() + group.shard_offset * size,
                          static_cast<size_t>(group.elements) * size),
              0)
        << group.what;
    rig.store().EndRead(read);
  }
  const offload::NvmeParamStoreStats stats = rig.store().stats();
  EXPECT_EQ(stats.group_writes, static_cast<int64_t>(rig.store().groups().size()));
  EXPECT_EQ(stats.nvme_reads, static_cast<int64_t>(rig.store().groups().size()));
  EXPECT_EQ(stats.cache_hits, 0) << "max_in_cpu = 0 caches nothing";
  EXPECT_LE(stats.peak_slots_in_use, 2);
  EXPECT_EQ(stats.slots_in_use, 0);
  // The pinned staging is buffer_count slots of at most buffer_size elements (page-rounded).
  const uint64_t bound = 2 * offload::AlignUp(buffer_size * size, offload::kIoAlignment);
  const MemoryUsage pinned =
      MemoryLedger::Global().Snapshot().at(MemoryTier::kHostPinned, MemoryCategory::kBuffers);
  EXPECT_GT(pinned.peak, pinned_before);
  EXPECT_LE(pinned.peak - pinned_before, bound);
  EXPECT_EQ(rig.store().pinned_bytes(),
            2 * offload::AlignUp(LargestGroup(rig.store()) * size, offload::kIoAlignment));
}

// The offloaded optimizer's master weights from parameters on NVMe, in tiles much smaller than
// the groups: every group is read at most twice, not once per tile it spans.
TEST_P(NvmeParamDtype, LoadingTheMasterWeightsReadsEachGroupAtMostTwice) {
  NvmeParamRig rig(GetParam(), /*buffer_count=*/2, /*buffer_size=*/16384, /*max_in_cpu=*/0);
  ASSERT_TRUE(rig.store_status().ok()) << rig.store_status().ToString();
  ASSERT_TRUE(rig.WriteShard(777).ok());
  const int64_t count = rig.layout().shard_elements();
  const int64_t groups = static_cast<int64_t>(rig.store().groups().size());
  ASSERT_GT(LargestGroup(rig.store()), 2 * offload::kOffloadTileQuantum)
      << "groups must span tiles";
  offload::OffloadedAdamOptions options;
  options.tile_elements = offload::kOffloadTileQuantum;
  options.param_store = &rig.store();
  auto adam = offload::OffloadedAdam::Create(rig.device(), CpuOptimizerOf(Config().optimizer),
                                             GetParam(), nullptr, DType::kF32, count, 1, options);
  ASSERT_TRUE(adam.ok()) << adam.status().ToString();
  const int64_t reads_before = rig.store().stats().nvme_reads;
  ASSERT_TRUE((*adam)->LoadMasterFromParams().ok());
  const int64_t reads = rig.store().stats().nvme_reads - reads_before;
  EXPECT_GE(reads, groups);
  EXPECT_LE(reads, 2 * groups);

  std::vector<float> master(static_cast<size_t>(count));
  ASSERT_TRUE((*adam)->ReadState(0, count, master.data(), nullptr, nullptr).ok());
  std::vector<float> expected(static_cast<size_t>(count));
  offload::ConvertToF32(rig.shard().data(), GetParam(), expected.data(), count, 1);
  EXPECT_EQ(std::memcmp(master.data(), expected.data(), expected.size() * sizeof(float)), 0);
}

TEST_P(NvmeParamDtype, CoordinatorGathersFromNvmeBitwiseAsFromTheShard) {
  NvmeParamRig rig(GetParam(), /*buffer_count=*/3, /*buffer_size=*/1 << 20, /*max_in_cpu=*/0);
  ASSERT_TRUE(rig.store_status().ok()) << rig.store_status().ToString();
  ASSERT_TRUE(rig.WriteShard(4096).ok());
  std::vector<float> from_shard;
  ASSERT_TRUE(rig.MakeCoordinator(/*nvme=*/false).ok());
  for (int pass = 0; pass < 2; ++pass) ASSERT_TRUE(rig.RunPass(&from_shard).ok());
  std::vector<float> from_nvme;
  ASSERT_TRUE(rig.MakeCoordinator(/*nvme=*/true).ok());
  for (int pass = 0; pass < 2; ++pass) {
    Status status = rig.RunPass(&from_nvme);
    ASSERT_TRUE(status.ok()) << status.ToString();
  }
  ASSERT_EQ(from_nvme.size(), from_shard.size());
  EXPECT_EQ(std::memcmp(from_nvme.data(), from_shard.data(), from_shard.size() * sizeof(float)), 0);
  EXPECT_LE(rig.store().stats().peak_slots_in_use, 3);
  EXPECT_GT(rig.store().stats().nvme_reads, 0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NvmeParamDtype, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(NvmeParam, GroupLargerThanBufferSizeIsRefusedNamingBoth) {
  NvmeParamRig probe(DType::kF32, 2, 1 << 20, 0);
  ASSERT_TRUE(probe.store_status().ok());
  const int64_t largest = LargestGroup(probe.store());
  NvmeParamRig rig(DType::kF32, 2, largest - 1, 0);
  const Status& status = rig.store_status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("offload_param.buffer_size"));
  EXPECT_THAT(status.message(), HasSubstr("the parameters of "));
}

TEST(NvmeParam, CorruptedExtentIsDataLossNamingTheUnit) {
  NvmeParamRig rig(DType::kF32, 2, 1 << 20, /*max_in_cpu=*/0);
  ASSERT_TRUE(rig.store_status().ok());
  ASSERT_TRUE(rig.WriteShard(4096).ok());
  ASSERT_TRUE(rig.MakeCoordinator(/*nvme=*/true).ok());
  // Rank 0 flips one byte inside the extent of the second group (a unit's run) in its swap file;
  // the other ranks' stores are intact.
  const bool corrupt = TestWorld().rank() == 0;
  const offload::NvmeParamGroup& victim = rig.store().groups()[1];
  Result<offload::SwapExtent> extent = rig.store().swap_store().Find(victim.extent);
  ASSERT_TRUE(extent.ok());
  const std::string path = rig.store().swap_store().file_paths().at(0);
  const uint64_t at =
      offload::SwapDataOffset(offload::SwapSlotBytes(offload::SwapStoreOptions{}.max_extents)) +
      extent->offset + 8;
  if (corrupt) {
    const int fd = open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t byte = 0;
    ASSERT_EQ(pread(fd, &byte, 1, static_cast<off_t>(at)), 1);
    byte ^= 0x40;
    ASSERT_EQ(pwrite(fd, &byte, 1, static_cast<off_t>(at)), 1);
    close(fd);
  }
  std::vector<float> seen;
  const Status status = rig.RunPass(&seen);
  if (corrupt) {
    EXPECT_EQ(status.code(), StatusCode::kDataLoss) << status.ToString();
    EXPECT_THAT(status.message(), HasSubstr(victim.what));
  } else {
    // The others fail at the same gather, naming rank 0's failed read, without a timeout.
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
    EXPECT_THAT(status.message(), HasSubstr("NVMe parameter read failed"));
  }
}

TEST(NvmeParam, PrefetchIssuesTheNextReadBeforeTheComputeEnds) {
  NvmeParamRig rig(DType::kBF16, 4, 1 << 20, /*max_in_cpu=*/0);
  ASSERT_TRUE(rig.store_status().ok());
  ASSERT_TRUE(rig.WriteShard(4096).ok());
  ASSERT_TRUE(rig.MakeCoordinator(/*nvme=*/true).ok());
  std::vector<float> seen;
  ASSERT_TRUE(rig.RunPass(&seen).ok());  // records the trace
  // Replay: when unit u's forward compute would run (its fetch returned), the read of unit
  // u + 1's group has been issued already.
  const int64_t reads_before = rig.store().stats().nvme_reads;
  std::vector<int64_t> issued_at_compute;
  ASSERT_TRUE(rig.RunPass(&seen,
                          [&](size_t) {
                            issued_at_compute.push_back(rig.store().stats().nvme_reads -
                                                        reads_before);
                          })
                  .ok());
  const int groups = static_cast<int>(rig.store().groups().size()) -
                     (rig.layout().persistent_elements() > 0 ? 1 : 0);
  ASSERT_GE(groups, 3);
  for (int u = 0; u + 1 < groups; ++u) {
    EXPECT_GE(issued_at_compute[static_cast<size_t>(u)], u + 2)
        << "the read of group " << u + 1 << " was not issued before group " << u << "'s compute";
  }
  EXPECT_GT(rig.coordinator().stats().prefetches, 0);
}

TEST(NvmeParam, MaxInCpuCachesTheFirstGroupsReadAndKeepsThemFresh) {
  NvmeParamRig probe(DType::kF32, 2, 1 << 20, 0);
  ASSERT_TRUE(probe.store_status().ok());
  const std::vector<offload::NvmeParamGroup>& groups = probe.store().groups();
  ASSERT_GE(groups.size(), 3u);
  const int64_t budget = groups[0].elements + groups[1].elements;
  NvmeParamRig rig(DType::kF32, 2, 1 << 20, budget);
  ASSERT_TRUE(rig.WriteShard(4096).ok());
  ASSERT_TRUE(rig.MakeCoordinator(/*nvme=*/true).ok());
  std::vector<float> seen;
  ASSERT_TRUE(rig.RunPass(&seen).ok());
  ASSERT_TRUE(rig.RunPass(&seen).ok());
  const offload::NvmeParamStoreStats first = rig.store().stats();
  EXPECT_GT(first.cache_hits, 0) << "the replay reads the cached groups from host memory";
  EXPECT_LE(rig.store().cache_bytes(), static_cast<uint64_t>(budget) * sizeof(float));
  EXPECT_GT(rig.store().cache_bytes(), 0u);
  // A step changes every value: the write-back refreshes the cached copies (write-through), so
  // the next pass reads the new values from the cache and from NVMe alike.
  rig.ChangeShard();
  ASSERT_TRUE(rig.WriteShard(3000).ok());
  ASSERT_TRUE(rig.coordinator().GatherPersistent().ok());  // as after every optimizer step
  seen.clear();
  ASSERT_TRUE(rig.RunPass(&seen).ok());
  const offload::NvmeParamStoreStats second = rig.store().stats();
  EXPECT_GT(second.cache_hits, first.cache_hits);
  ASSERT_TRUE(rig.MakeCoordinator(/*nvme=*/false).ok());
  std::vector<float> expected;
  ASSERT_TRUE(rig.RunPass(&expected).ok());
  ASSERT_EQ(seen.size(), expected.size());
  EXPECT_EQ(std::memcmp(seen.data(), expected.data(), seen.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace sluice::zero::testing
