// Precedence default < file < environment < --set, values parsed with the setting's type.
#include <gtest/gtest.h>

#include "config_test_util.h"

namespace sluice {
namespace {

using testing::IsolatedSources;
using testing::LoadYaml;
using testing::MustLoadYaml;
using Env = std::vector<std::pair<std::string, std::string>>;

constexpr const char* kBase = "train_batch_size: 8\nzero_optimization:\n  stage: 1\n";

TEST(ConfigOverridesTest, EnvironmentOverridesFile) {
  ConfigSources sources = IsolatedSources();
  sources.env =
      Env{{"SLUICE_CFG_ZERO_OPTIMIZATION__STAGE", "3"}, {"PATH", "/bin"}, {"SLUICE_LOG", "info"}};
  Config c = MustLoadYaml(kBase, sources);
  EXPECT_EQ(c.zero.stage, 3);
  const SettingEntry& e = c.values.entry("zero_optimization.stage");
  EXPECT_EQ(e.source, ValueSource::kEnv);
  EXPECT_EQ(e.origin, "environment variable SLUICE_CFG_ZERO_OPTIMIZATION__STAGE=3");
}

TEST(ConfigOverridesTest, SetOverridesEnvironmentAndFile) {
  ConfigSources sources = IsolatedSources();
  sources.env = Env{{"SLUICE_CFG_ZERO_OPTIMIZATION__STAGE", "3"}};
  sources.set_overrides = {"zero_optimization.stage=2"};
  Config c = MustLoadYaml(kBase, sources);
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_EQ(c.values.entry("zero_optimization.stage").source, ValueSource::kSet);
  EXPECT_EQ(c.values.entry("train_batch_size").source, ValueSource::kFile);
}

TEST(ConfigOverridesTest, LaterSetWins) {
  ConfigSources sources = IsolatedSources();
  sources.set_overrides = {"zero_optimization.stage=2", "zero_optimization.stage=0"};
  EXPECT_EQ(MustLoadYaml(kBase, sources).zero.stage, 0);
}

TEST(ConfigOverridesTest, ValuesAreParsedWithTheSettingType) {
  ConfigSources sources = IsolatedSources();
  sources.set_overrides = {"zero_optimization.reduce_bucket_size=5e7",
                           "optimizer.params.betas=[0.8, 0.95]",
                           "device.host_memory_limit=2GiB",
                           "aio.block_size=256KiB",
                           "optimizer.type=adam",
                           "bf16.enabled=true",
                           "optimizer.params.lr=3e-4",
                           "data.train_path=data/a: b.txt",
                           "run.dir=runs/x#1"};
  Config c = MustLoadYaml(kBase, sources);
  EXPECT_EQ(c.zero.reduce_bucket_size, 50000000);
  EXPECT_EQ(c.optimizer.beta1, 0.8);
  EXPECT_EQ(c.optimizer.beta2, 0.95);
  EXPECT_EQ(c.device.host_memory_limit, int64_t{2} << 30);
  EXPECT_EQ(c.aio.block_size, 256 * 1024);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdam);
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.data.train_path, "data/a: b.txt");  // strings are taken verbatim
  EXPECT_EQ(c.run.dir, "runs/x#1");
}

TEST(ConfigOverridesTest, EnvironmentUsesTheSameTypes) {
  ConfigSources sources = IsolatedSources();
  sources.env = Env{{"SLUICE_CFG_DEVICE__TYPE", "cpu"},
                    {"SLUICE_CFG_DEVICE__MEMORY_LIMIT", "64MiB"},
                    {"SLUICE_CFG_ZERO_OPTIMIZATION__OFFLOAD_OPTIMIZER__DEVICE", "cpu"},
                    {"SLUICE_CFG_ZERO_OPTIMIZATION__OFFLOAD_OPTIMIZER__PIN_MEMORY", "false"}};
  Config c = MustLoadYaml(kBase, sources);
  EXPECT_EQ(c.device.type, DeviceType::kCpu);
  EXPECT_EQ(c.device.memory_limit, int64_t{64} << 20);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_FALSE(c.zero.offload_optimizer.pin_memory);
}

TEST(ConfigOverridesTest, SetCanGiveAWholeSection) {
  ConfigSources sources = IsolatedSources();
  sources.set_overrides = {"zero_optimization.offload_optimizer={device: nvme, nvme_path: /nvme}"};
  Config c = MustLoadYaml(kBase, sources);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::kNvme);
  EXPECT_EQ(c.zero.offload_optimizer.nvme_path, "/nvme");
}

TEST(ConfigOverridesTest, OverridesGoThroughAliases) {
  ConfigSources sources = IsolatedSources();
  sources.set_overrides = {"aio.thread_count=4", "bfloat16.enabled=true"};
  Config c = MustLoadYaml(kBase, sources);
  EXPECT_EQ(c.aio.intra_op_parallelism, 4);
  EXPECT_TRUE(c.bf16.enabled);
}

TEST(ConfigOverridesTest, EmptyValueKeepsTheLowerLayer) {
  ConfigSources sources = IsolatedSources();
  sources.env = Env{{"SLUICE_CFG_ZERO_OPTIMIZATION__STAGE", ""}};
  EXPECT_EQ(MustLoadYaml(kBase, sources).zero.stage, 1);
}

TEST(ConfigOverridesTest, OverrideErrorsNameTheirOrigin) {
  ConfigSources sources = IsolatedSources();
  sources.set_overrides = {"zero_optimization.stage=7"};
  Result<Config> c = LoadYaml(kBase, sources);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "--set zero_optimization.stage=7: zero_optimization.stage: 7 is out of range: allowed "
            "an integer 0 to 3");

  sources = IsolatedSources();
  sources.env = Env{{"SLUICE_CFG_ZERO_OPTIMIZATION__STAGEE", "3"}};
  c = LoadYaml(kBase, sources);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "environment variable SLUICE_CFG_ZERO_OPTIMIZATION__STAGEE=3: unknown key "
            "zero_optimization.stagee (did you mean zero_optimization.stage?)");
}

TEST(ConfigOverridesTest, ProcessEnvironmentIsReadWhenNotGiven) {
  ::setenv("SLUICE_CFG_RUN__STEPS", "77", 1);
  ConfigSources sources = IsolatedSources();
  sources.env.reset();
  Config c = MustLoadYaml(kBase, sources);
  ::unsetenv("SLUICE_CFG_RUN__STEPS");
  EXPECT_EQ(c.run.steps, 77);
  EXPECT_EQ(c.values.entry("run.steps").source, ValueSource::kEnv);
}

}  // namespace
}  // namespace sluice
