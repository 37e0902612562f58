// DeepSpeed's batch-size inference (runtime/config.py _set_batch_related_parameters and
// _batch_assertion), row by row, with its error messages.
#include <gtest/gtest.h>

#include <optional>

#include "config_test_util.h"

namespace sluice {
namespace {

using testing::IsolatedSources;
using testing::LoadYaml;

struct BatchCase {
  const char* name;
  std::optional<int64_t> tbs, mbs, gas;
  int world_size;
  // Expected result, or the error substring.
  int64_t want_tbs, want_mbs, want_gas;
  const char* error;
};

std::string BatchYaml(const BatchCase& c) {
  std::string yaml;
  if (c.tbs) yaml += fmt::format("train_batch_size: {}\n", *c.tbs);
  if (c.mbs) yaml += fmt::format("train_micro_batch_size_per_gpu: {}\n", *c.mbs);
  if (c.gas) yaml += fmt::format("gradient_accumulation_steps: {}\n", *c.gas);
  if (yaml.empty()) yaml = "steps_per_print: 1\n";
  return yaml;
}

class BatchInferenceTest : public ::testing::TestWithParam<BatchCase> {};

TEST_P(BatchInferenceTest, MatchesDeepSpeed) {
  const BatchCase& c = GetParam();
  ConfigSources sources = IsolatedSources();
  sources.world_size = c.world_size;
  Result<Config> config = LoadYaml(BatchYaml(c), sources);
  if (c.error != nullptr) {
    ASSERT_FALSE(config.ok()) << "expected: " << c.error;
    EXPECT_NE(config.status().message().find(c.error), std::string::npos)
        << config.status().message();
    return;
  }
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->batch.train_batch_size, c.want_tbs);
  EXPECT_EQ(config->batch.micro_batch_per_gpu, c.want_mbs);
  EXPECT_EQ(config->batch.gradient_accumulation_steps, c.want_gas);
  EXPECT_EQ(config->dp_world_size, c.world_size);
}

constexpr std::nullopt_t kNone = std::nullopt;

INSTANTIATE_TEST_SUITE_P(
    Rows, BatchInferenceTest,
    ::testing::Values(
        // all three: only asserted
        BatchCase{"AllThree", 32, 4, 2, 4, 32, 4, 2, nullptr},
        BatchCase{"AllThreeMismatch", 32, 4, 2, 2, 0, 0, 0,
                  "Check batch related parameters. train_batch_size is not equal to "
                  "micro_batch_per_gpu * gradient_acc_step * world_size 32 != 4 * 2 * 2"},
        // TBS + MBS: GAS = TBS // MBS // ws
        BatchCase{"TbsMbs", 32, 4, kNone, 2, 32, 4, 4, nullptr},
        BatchCase{"TbsMbsNotDivisible", 10, 4, kNone, 1, 0, 0, 0, "10 != 4 * 2 * 1"},
        BatchCase{"TbsMbsZeroAccumulation", 4, 8, kNone, 1, 0, 0, 0,
                  "Gradient accumulation steps: 0 has to be greater than 0"},
        // TBS + GAS: MBS = TBS // ws // GAS
        BatchCase{"TbsGas", 32, kNone, 4, 2, 32, 4, 4, nullptr},
        BatchCase{"TbsGasZeroMicro", 2, kNone, 4, 1, 0, 0, 0,
                  "Micro batch size per gpu: 0 has to be greater than 0"},
        BatchCase{"TbsGasNotDivisible", 30, kNone, 4, 2, 0, 0, 0, "30 != 3 * 4 * 2"},
        // MBS + GAS: TBS = MBS * GAS * ws
        BatchCase{"MbsGas", kNone, 4, 3, 4, 48, 4, 3, nullptr},
        // TBS only: GAS = 1, MBS = TBS // ws
        BatchCase{"TbsOnly", 16, kNone, kNone, 4, 16, 4, 1, nullptr},
        BatchCase{"TbsOnlyNotDivisible", 10, kNone, kNone, 4, 0, 0, 0, "10 != 2 * 1 * 4"},
        BatchCase{"TbsOnlySmallerThanWorld", 2, kNone, kNone, 4, 0, 0, 0,
                  "Micro batch size per gpu: 0 has to be greater than 0"},
        // MBS only: GAS = 1, TBS = MBS * ws
        BatchCase{"MbsOnly", kNone, 8, kNone, 2, 16, 8, 1, nullptr},
        // GAS only / none: DeepSpeed's assertion
        BatchCase{"GasOnly", kNone, kNone, 4, 1, 0, 0, 0,
                  "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"},
        BatchCase{
            "None", kNone, kNone, kNone, 1, 0, 0, 0,
            "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"}),
    [](const ::testing::TestParamInfo<BatchCase>& info) { return std::string(info.param.name); });

TEST(BatchInferenceTest, DerivedValuesAreRecordedAsDerived) {
  ConfigSources sources = IsolatedSources();
  sources.world_size = 2;
  Result<Config> c = LoadYaml("train_batch_size: 16\ntrain_micro_batch_size_per_gpu: 2\n", sources);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const SettingEntry& gas = c->values.entry("gradient_accumulation_steps");
  EXPECT_EQ(gas.source, ValueSource::kDerived);
  EXPECT_EQ(gas.note, "train_batch_size // micro batch // world size 2");
  EXPECT_EQ(c->values.entry("train_batch_size").source, ValueSource::kFile);
}

TEST(BatchInferenceTest, ZeroBatchIsOutOfRange) {
  Result<Config> c = LoadYaml("train_batch_size: 0\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(
      c.status().message().find("train_batch_size: 0 is out of range: allowed an integer >= 1"),
      std::string::npos)
      << c.status().message();
}

// The grid's keys at their "off" values (DeepSpeed's defaults): every rank is data-parallel.
TEST(BatchInferenceTest, GridKeysOffLeaveTheWholeWorldDataParallel) {
  ConfigSources sources = IsolatedSources();
  sources.world_size = 3;
  Result<Config> c = LoadYaml(
      "train_micro_batch_size_per_gpu: 2\ntensor_parallel: {autotp_size: 0}\n"
      "pipeline: {stages: auto}\n",
      sources);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->parallel.tensor, 1);
  EXPECT_EQ(c->parallel.pipeline, 1);
  EXPECT_EQ(c->dp_world_size, 3);
  EXPECT_EQ(c->batch.train_batch_size, 6);
}

}  // namespace
}  // namespace sluice
