// The NVMe figures of the estimate against the disk: a small stage-3 run with the optimizer state
// and the parameters on NVMe (two swap directories on one file system) takes exactly the bytes
// the estimate counts, file by file (allocated blocks of the swap files and their lock files);
// and such a run fits a file system, or a file size limit, only slightly larger than the
// estimate, with the pre-flight check agreeing. (The swap store once grew 256 MiB at a time: a
// run estimated at a few MiB failed with ENOSPC.) Run under mpirun -np 1, for the communicator.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/estimate/budget_guard.h"
#include "engine/estimate/memory_estimate.h"
#include "engine/model/model.h"
#include "engine/train/precision.h"
#include "engine/train/run_setup.h"
#include "engine/zero/zero_engine.h"
#include "engine/zero/zero_options.h"
#include "runtime/device/device_factory.h"
#include "tests/common/test_ops.h"
#include "tests/common/test_world.h"
#include "tests/offload/test_support.h"

namespace sluice::estimate {
namespace {

using offload::testutil::ScopedFileSizeLimit;
using offload::testutil::ScopedMount;
using offload::testutil::TempDir;
using ::sluice::testing::TestWorld;

Config MakeConfig(const std::string& optimizer_dir, const std::string& param_dir) {
  const std::string text = fmt::format(R"(
train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 1
optimizer: {{type: adamw, params: {{lr: 1e-3}}}}
model: {{family: gpt2, n_layer: 3, n_head: 4, d_model: 64, d_ff: 256, vocab_size: 512,
        seq_len: 32}}
device: {{type: cpu, memory_limit: 256MiB, host_memory_limit: 1GiB, threads: 1}}
zero_optimization: {{stage: 3, sub_group_size: 20000, stage3_param_persistence_threshold: 1000,
                    offload_optimizer: {{device: nvme, nvme_path: "{}"}},
                    offload_param: {{device: nvme, nvme_path: "{}"}}}}
)",
                                       optimizer_dir, param_dir);
  ConfigSources sources;
  sources.env.emplace();
  sources.world_size = 1;
  Result<Config> config = LoadConfigFromText(text, ConfigFormat::kYaml, sources);
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  return config.ok() ? *config : Config{};
}

// Creates the engine (and with it both swap stores), runs one training step, then calls
// `inspect` while the stores are still open.
template <typename Inspect>
Status RunOneStep(const Config& config, Inspect&& inspect) {
  SLUICE_ASSIGN_OR_RETURN(zero::ZeroOptions zero_options, zero::ZeroOptionsFromConfig(config));
  SLUICE_ASSIGN_OR_RETURN(
      model::ModelOptions model_options,
      train::ModelOptionsFromConfig(config, train::PrecisionOf(config.model.dtype)));
  model_options.num_threads = 1;
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                          CreateDevice({.memory_limit_bytes = uint64_t{256} << 20}));
  model::DeviceAllocator allocator(*device);
  const std::unique_ptr<ops::OpsBackend> ops = sluice::testing::CpuOpsOn(*device);
  SLUICE_ASSIGN_OR_RETURN(auto net, model::Model<float>::Create(model_options, allocator, *ops,
                                                                model::ModelStorage::kExternal));
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<zero::ZeroEngine> engine,
                          zero::ZeroEngine::Create(zero_options, *net, TestWorld(), *device));
  SLUICE_RETURN_IF_ERROR(engine->InitializeParameters(7));
  const int64_t batch = config.batch.micro_batch_per_gpu;
  const int64_t seq = config.model.seq_len;
  std::mt19937 random(11);
  std::uniform_int_distribution<int32_t> token(0, 511);
  std::vector<int32_t> inputs(batch * seq), targets(batch * seq);
  for (int32_t& t : inputs) t = token(random);
  for (int32_t& t : targets) t = token(random);
  SLUICE_RETURN_IF_ERROR(
      engine->ForwardBackward(inputs.data(), targets.data(), batch, seq, 1.0).status());
  SLUICE_RETURN_IF_ERROR(
      engine->Step({.lr = 1e-3, .loss_scale = 1.0, .max_grad_norm = 1.0}).status());
  inspect();
  return OkStatus();
}

// The regular files in `dir`: their sizes in whole 4 KiB blocks (the swap files are
// preallocated: every block is allocated) and the blocks the file system reports for them.
struct DirUsage {
  int64_t blocks = 0;     // sum of align(st_size, 4096)
  int64_t allocated = 0;  // sum of st_blocks x 512
  int files = 0;
};

DirUsage UsageOf(const std::string& dir) {
  DirUsage usage;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    struct stat st {};
    if (stat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    usage.blocks += (static_cast<int64_t>(st.st_size) + 4095) / 4096 * 4096;
    usage.allocated += static_cast<int64_t>(st.st_blocks) * 512;
    ++usage.files;
  }
  return usage;
}

// Exactly the estimate in blocks; the file system's count within its metadata (ext4: an extent
// index block once a file has more than 4 extents) of it.
void ExpectTakes(const DirUsage& usage, int64_t estimate, const char* what) {
  EXPECT_EQ(usage.files, 2) << what << ": the swap file and its lock file";
  EXPECT_EQ(usage.blocks, estimate) << what;
  EXPECT_NEAR(static_cast<double>(usage.allocated), static_cast<double>(estimate),
              4096.0 * usage.files)
      << what;
}

MemoryEstimate NvmeEstimate(const Config& config) {
  Result<MemoryEstimate> estimate = EstimateMemory(config, 1);
  EXPECT_TRUE(estimate.ok()) << estimate.status().ToString();
  return estimate.ok() ? *estimate : MemoryEstimate{};
}

TEST(NvmeFootprint, TheSwapFilesTakeWhatTheEstimateCounts) {
  TempDir dir;
  const std::string optimizer_dir = dir.Subdir("optimizer");
  const std::string param_dir = dir.Subdir("params");
  const Config config = MakeConfig(optimizer_dir, param_dir);
  const MemoryEstimate e = NvmeEstimate(config);
  const int64_t optimizer = e.optimizer_swap_bytes;
  const int64_t params = e.param_swap_bytes;
  ASSERT_GT(optimizer, 0);
  ASSERT_GT(params, 0);
  EXPECT_EQ(optimizer + params, e.tier_bytes(MemoryTier::kNvme));

  DirUsage used_optimizer, used_params;
  const Status run = RunOneStep(config, [&] {
    used_optimizer = UsageOf(optimizer_dir);
    used_params = UsageOf(param_dir);
  });
  ASSERT_TRUE(run.ok()) << run.ToString();
  if (std::getenv("SLUICE_ESTIMATE_VERBOSE") != nullptr) {
    for (const LineItem& item : e.items) {
      if (item.tier != MemoryTier::kNvme) continue;
      std::printf("%s: %lld B (%s)\n", item.name.c_str(), static_cast<long long>(item.bytes),
                  item.formula.c_str());
    }
    const auto print = [](const char* what, int64_t estimate, const DirUsage& used) {
      std::printf("%s store: estimate %lld B, files %lld B in blocks, %lld B allocated\n", what,
                  static_cast<long long>(estimate), static_cast<long long>(used.blocks),
                  static_cast<long long>(used.allocated));
    };
    print("optimizer", optimizer, used_optimizer);
    print("parameter", params, used_params);
  }
  ExpectTakes(used_optimizer, optimizer, "optimizer store");
  ExpectTakes(used_params, params, "parameter store");
  // Scratch stores: nothing is left once the engine is gone.
  EXPECT_EQ(UsageOf(optimizer_dir).files, 0);
  EXPECT_EQ(UsageOf(param_dir).files, 0);
}

// Each swap file may grow one block past its share of the estimate, no further.
TEST(NvmeFootprint, ARunFitsAFileSizeLimitJustAboveTheEstimate) {
  TempDir dir;
  const Config config = MakeConfig(dir.Subdir("optimizer"), dir.Subdir("params"));
  const MemoryEstimate e = NvmeEstimate(config);
  const int64_t largest_store = std::max(e.optimizer_swap_bytes, e.param_swap_bytes);
  Status run;
  {
    ScopedFileSizeLimit limit(static_cast<uint64_t>(largest_store) + 4096);
    run = RunOneStep(config, [] {});
  }
  EXPECT_TRUE(run.ok()) << run.ToString();
}

// The issue's case: `sluice estimate` and the pre-flight check say the run fits the swap
// directory's file system, and it does, with 64 KiB to spare.
TEST(NvmeFootprint, ARunFitsAFileSystemJustLargerThanTheEstimate) {
  TempDir probe;
  const int64_t need =
      NvmeEstimate(MakeConfig(probe.path(), probe.path())).tier_bytes(MemoryTier::kNvme);
  ScopedMount small("tmpfs", fmt::format("size={}", need + (64 << 10)));
  if (!small.ok()) GTEST_SKIP() << small.reason();
  const Config config = MakeConfig(small.path(), small.path());
  ASSERT_EQ(NvmeEstimate(config).tier_bytes(MemoryTier::kNvme), need);
  const Status preflight = CheckBudgetsBeforeAllocating(config, 1);
  ASSERT_TRUE(preflight.ok()) << preflight.ToString();
  const Status run = RunOneStep(config, [] {});
  EXPECT_TRUE(run.ok()) << run.ToString();

  // And 64 KiB short of it, the pre-flight check refuses, naming the NVMe budget.
  ScopedMount smaller("tmpfs", fmt::format("size={}", need - (64 << 10)));
  ASSERT_TRUE(smaller.ok()) << smaller.reason();
  const Status refused =
      CheckBudgetsBeforeAllocating(MakeConfig(smaller.path(), smaller.path()), 1);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("the nvme budget is exceeded"));
}

}  // namespace
}  // namespace sluice::estimate
