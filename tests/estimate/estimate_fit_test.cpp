// Budgets, the alternatives offered when a config does not fit, the stage comparison, the
// report's JSON record and the --model merge of the config loader.
#include "engine/estimate/estimate_fit.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/config/config.h"
#include "engine/estimate/estimate_report.h"
#include "estimate_test_util.h"

namespace sluice::estimate {
namespace {

using testing::BaseYaml;
using testing::LoadYaml;

MemoryEstimate FitEstimate(const Config& config, int world_size) {
  Result<MemoryEstimate> estimate = EstimateMemory(config, world_size);
  EXPECT_TRUE(estimate.ok()) << estimate.status().ToString();
  return estimate.ok() ? *estimate : MemoryEstimate{};
}

const Variant* FindVariant(const std::vector<Variant>& variants, const std::string& prefix) {
  for (const Variant& v : variants) {
    if (v.change.starts_with(prefix)) return &v;
  }
  return nullptr;
}

TEST(EstimateFitTest, ComparesDeviceAndNodeHostBytesWithTheLimits) {
  Config config = LoadYaml(BaseYaml("stage: 2, offload_optimizer: {device: cpu}"), 4);
  const MemoryEstimate e = FitEstimate(config, 4);
  FitReport fit = CheckFit(config, e);
  ASSERT_EQ(fit.checks.size(), 2u);  // nothing on NVMe
  EXPECT_EQ(fit.checks[0].name, "device");
  EXPECT_EQ(fit.checks[0].need, e.tier_bytes(MemoryTier::kDevice));
  EXPECT_EQ(fit.checks[0].limit, int64_t{1} << 30);
  EXPECT_EQ(fit.checks[1].name, "host");
  EXPECT_EQ(fit.checks[1].need, 4 * e.host_bytes());  // every rank of the node
  EXPECT_TRUE(fit.fits());

  config.device.host_memory_limit = 4 * e.host_bytes() - 1;
  EXPECT_FALSE(CheckFit(config, e).checks[1].fits());
  config.device.memory_limit.reset();
  EXPECT_FALSE(CheckFit(config, e).checks[0].limit.has_value());
  EXPECT_NE(CheckFit(config, e).checks[0].limit_source.find("not checked"), std::string::npos);
}

TEST(EstimateFitTest, NvmeSpaceIsCheckedWhenTheDirectoryExists) {
  const std::string yaml = BaseYaml("stage: 3, offload_optimizer: {device: nvme, nvme_path: /tmp}");
  const Config config = LoadYaml(yaml, 2);
  const MemoryEstimate e = FitEstimate(config, 2);
  const FitReport fit = CheckFit(config, e);
  ASSERT_EQ(fit.checks.size(), 3u);
  EXPECT_EQ(fit.checks[2].name, "nvme");
  EXPECT_EQ(fit.checks[2].need, 2 * e.tier_bytes(MemoryTier::kNvme));
  EXPECT_TRUE(fit.checks[2].limit.has_value()) << fit.checks[2].limit_source;

  // A directory the swap store will create: the free space of the file system it will be on.
  Config missing = config;
  missing.zero.offload_optimizer.nvme_path = "/tmp/sluice_not_yet_created/swap";
  const FitReport later = CheckFit(missing, e);
  ASSERT_TRUE(later.checks[2].limit.has_value()) << later.checks[2].limit_source;
  // The same file system as /tmp (other tests may write to it meanwhile).
  EXPECT_NEAR(static_cast<double>(*later.checks[2].limit),
              static_cast<double>(*fit.checks[2].limit), 1e9);

  // A path that can never be a directory: unknown, and why.
  Config impossible = config;
  impossible.zero.offload_optimizer.nvme_path = "/proc/self/status/swap";
  const FitReport unknown = CheckFit(impossible, e);
  EXPECT_FALSE(unknown.checks[2].limit.has_value());
  EXPECT_NE(unknown.checks[2].limit_source.find("ENOTDIR"), std::string::npos)
      << unknown.checks[2].limit_source;
}

TEST(EstimateFitTest, EachSwapDirectoryIsCheckedAgainstItsOwnFileSystem) {
  Config config = LoadYaml(
      BaseYaml("stage: 3, offload_optimizer: {device: nvme, nvme_path: /tmp/sluice_fit_a}, "
               "offload_param: {device: nvme, nvme_path: /tmp/sluice_fit_b}"),
      2);
  const MemoryEstimate e = FitEstimate(config, 2);
  const int64_t optimizer = e.optimizer_swap_bytes;
  const int64_t params = e.param_swap_bytes;
  ASSERT_GT(optimizer, 0);
  ASSERT_GT(params, 0);
  // One file system: one check, both stores against its free space.
  FitReport fit = CheckFit(config, e);
  ASSERT_EQ(fit.checks.size(), 3u);
  EXPECT_EQ(optimizer + params, e.tier_bytes(MemoryTier::kNvme));
  EXPECT_EQ(fit.checks[2].need, 2 * (optimizer + params));
  EXPECT_NE(fit.checks[2].limit_source.find("/tmp/sluice_fit_a and /tmp/sluice_fit_b"),
            std::string::npos)
      << fit.checks[2].limit_source;

  // Two file systems: each store against its own.
  struct stat tmp {};
  struct stat shm {};
  if (stat("/tmp", &tmp) != 0 || stat("/dev/shm", &shm) != 0 || tmp.st_dev == shm.st_dev) {
    GTEST_SKIP() << "needs /tmp and /dev/shm on two file systems";
  }
  config.zero.offload_param.nvme_path = "/dev/shm/sluice_fit_b";
  fit = CheckFit(config, e);
  ASSERT_EQ(fit.checks.size(), 4u);
  EXPECT_EQ(fit.checks[2].need, 2 * optimizer);
  EXPECT_NE(fit.checks[2].limit_source.find("/tmp/sluice_fit_a"), std::string::npos);
  EXPECT_EQ(fit.checks[3].need, 2 * params);
  EXPECT_NE(fit.checks[3].limit_source.find("/dev/shm/sluice_fit_b"), std::string::npos);
}

// Stage 3 holds less than the other stages only when it does not keep every unit gathered for
// reuse: these tests set stage3_max_reuse_distance to 0.
constexpr const char* kLean = ", stage3_max_reuse_distance: 0";

TEST(EstimateFitTest, OffersChangesThatReduceWhatDoesNotFit) {
  Config config = LoadYaml(BaseYaml(std::string("stage: 0") + kLean), 4);
  const MemoryEstimate e = FitEstimate(config, 4);
  // A device budget between the stage-3 and the stage-0 figure.
  config.device.memory_limit = e.tier_bytes(MemoryTier::kDevice) * 2 / 3;
  const FitReport fit = CheckFit(config, e);
  ASSERT_FALSE(fit.fits());
  const std::vector<Variant> alternatives = FindAlternatives(config, 4, {}, fit);
  const Variant* stage3 = FindVariant(alternatives, "zero_optimization.stage: 3");
  ASSERT_NE(stage3, nullptr);
  EXPECT_LT(stage3->estimate.tier_bytes(MemoryTier::kDevice), e.tier_bytes(MemoryTier::kDevice));
  EXPECT_TRUE(stage3->fit.fits());
  EXPECT_NE(FindVariant(alternatives, "zero_optimization.stage: 1, offload_optimizer"), nullptr);
  const Variant* checkpointing = FindVariant(alternatives, "model.activation_checkpointing: true");
  ASSERT_NE(checkpointing, nullptr);
  EXPECT_TRUE(checkpointing->options.activation_checkpointing);
  const Variant* micro = FindVariant(alternatives, "train_micro_batch_size_per_gpu: 1");
  ASSERT_NE(micro, nullptr);
  EXPECT_EQ(micro->estimate.micro_batch, 1);
  for (const Variant& v : alternatives) {
    EXPECT_LE(v.estimate.tier_bytes(MemoryTier::kDevice), e.tier_bytes(MemoryTier::kDevice))
        << v.change;
  }
  EXPECT_TRUE(FindAlternatives(config, 4, {}, CheckFit(LoadYaml(BaseYaml()), e)).empty());
}

TEST(EstimateFitTest, ComparesTheStagesWithTheirShardedFigures) {
  const Config config = LoadYaml(BaseYaml(std::string("stage: 1") + kLean), 4);
  auto stages = CompareStages(config, 4, {});
  ASSERT_TRUE(stages.ok()) << stages.status().ToString();
  ASSERT_EQ(stages->size(), 7u);
  int64_t previous_states = INT64_MAX;
  for (int stage = 0; stage <= 3; ++stage) {
    const MemoryEstimate& e = (*stages)[stage].estimate;
    EXPECT_EQ(e.stage, stage);
    const int64_t states = e.bytes(MemoryTier::kDevice, MemoryCategory::kParams) +
                           e.bytes(MemoryTier::kDevice, MemoryCategory::kGrads) +
                           e.bytes(MemoryTier::kDevice, MemoryCategory::kOptimizer);
    EXPECT_LT(states, previous_states) << "stage " << stage;
    previous_states = states;
  }
  const MemoryEstimate& offloaded = (*stages)[6].estimate;
  EXPECT_EQ(offloaded.offload_param, OffloadDevice::kCpu);
  for (const LineItem& item : offloaded.items) {
    if (item.name.starts_with("parameter shard")) {
      EXPECT_EQ(item.tier, MemoryTier::kHost) << item.name;  // pageable, only staging is pinned
    }
  }
  EXPECT_GT(offloaded.bytes(MemoryTier::kHostPinned, MemoryCategory::kOptimizer), 0);
}

TEST(EstimateReportTest, JsonRecordCarriesTheTableTheItemsAndTheBudgets) {
  const Config config = LoadYaml(BaseYaml("stage: 2"), 2);
  EstimateReport report;
  report.config = &config;
  report.estimate = FitEstimate(config, 2);
  report.fit = CheckFit(config, report.estimate);
  report.stages = *CompareStages(config, 2, {});
  const nlohmann::ordered_json j = EstimateJson(report);
  EXPECT_EQ(j["schema"], "sluice.memory_estimate/1");
  EXPECT_EQ(j["model"]["parameters"], report.estimate.parameters);
  EXPECT_EQ(j["settings"]["stage"], 2);
  EXPECT_EQ(j["settings"]["world_size"], 2);
  EXPECT_EQ(j["per_rank"]["device"]["total"], report.estimate.tier_bytes(MemoryTier::kDevice));
  EXPECT_EQ(j["per_rank"]["device"]["categories"]["grads"],
            report.estimate.bytes(MemoryTier::kDevice, MemoryCategory::kGrads));
  EXPECT_EQ(j["items"].size(), report.estimate.items.size());
  EXPECT_EQ(j["budgets"][0]["name"], "device");
  EXPECT_EQ(j["fits"], true);
  EXPECT_EQ(j["stages"].size(), 7u);

  const std::string text = FormatEstimateText(report);
  for (const LineItem& item : report.estimate.items) {
    EXPECT_NE(text.find(item.name), std::string::npos) << item.name;
    EXPECT_NE(text.find(item.formula), std::string::npos) << item.formula;
  }
  EXPECT_NE(text.find("ZeRO stages on 2 rank(s)"), std::string::npos);
}

class EstimateConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice_estimate_config_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }
  std::filesystem::path dir_;
};

TEST_F(EstimateConfigTest, MergesTheModelFileOverADeepSpeedConfig) {
  const std::string ds = Write("ds_config.json", R"({
    "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
    "bf16": {"enabled": true},
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}})");
  // A bare model map.
  const std::string bare = Write("model.yaml",
                                 "family: llama\nn_layer: 2\nn_head: 4\n"
                                 "n_kv_head: 2\nd_model: 64\nvocab_size: 300\n");
  ConfigSources sources;
  sources.paths = {ds};
  sources.model_path = bare;
  sources.world_size = 4;
  sources.env.emplace();
  auto config = LoadConfig(sources);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_TRUE(config->model.present);
  EXPECT_EQ(config->model.family, ModelFamily::kLlama);
  EXPECT_EQ(config->model.vocab_size, 300);
  EXPECT_EQ(config->zero.stage, 3);
  EXPECT_EQ(config->batch.train_batch_size, 2 * 4 * 4);  // resolved for 4 ranks

  // A model section with a device section beside it, merged key by key.
  sources.model_path = Write("model_device.yaml",
                             "model: {family: gpt2, n_layer: 1, d_model: 32, n_head: 2}\n"
                             "device: {type: cpu, memory_limit: 64MiB}\n");
  config = LoadConfig(sources);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->model.family, ModelFamily::kGpt2);
  EXPECT_EQ(config->device.memory_limit, int64_t{64} << 20);
  EXPECT_TRUE(EstimateMemory(*config, 4).ok());

  // A mistake in the model file names it.
  sources.model_path = Write("bad.yaml", "model: {family: gpt2, n_layers: 1}\n");
  config = LoadConfig(sources);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().ToString().find("bad.yaml"), std::string::npos)
      << config.status().ToString();
  EXPECT_NE(config.status().ToString().find("n_layer"), std::string::npos);
}

}  // namespace
}  // namespace sluice::estimate
