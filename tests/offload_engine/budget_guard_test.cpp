// Budgets are hard (engine/estimate/budget_guard.h): a config that cannot fit a tier is refused
// with the tier, the bytes needed and available and the setting to change; one that fits passes.
#include "engine/estimate/budget_guard.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/estimate/estimate_test_util.h"

namespace sluice::estimate::testing {
namespace {

TEST(BudgetGuard, AFittingConfigPasses) {
  const Config config = LoadYaml(BaseYaml("stage: 0"));
  EXPECT_TRUE(CheckBudgetsBeforeAllocating(config, 1).ok());
}

TEST(BudgetGuard, DeviceOverBudgetNamesTierBytesAndSettings) {
  Config config = LoadYaml(BaseYaml("stage: 0"));
  config.device.memory_limit = int64_t{28} << 20;
  const Status status = CheckBudgetsBeforeAllocating(config, 2);
  ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  const std::string& m = status.message();
  EXPECT_NE(m.find("the device budget is exceeded"), std::string::npos) << m;
  EXPECT_NE(m.find("(29360128 bytes) available"), std::string::npos) << m;
  EXPECT_NE(m.find("raise device.memory_limit"), std::string::npos) << m;
  EXPECT_NE(m.find("bytes) needed per rank"), std::string::npos) << m;
  // The estimator's alternatives that fit are offered (a higher stage or offload).
  EXPECT_NE(m.find("zero_optimization."), std::string::npos) << m;
}

TEST(BudgetGuard, HostOverBudgetWithOffloadNamesTheHostLimit) {
  Config config = LoadYaml(BaseYaml("stage: 3, offload_optimizer: {device: cpu}"));
  config.device.host_memory_limit = int64_t{1} << 20;
  const Status status = CheckBudgetsBeforeAllocating(config, 1);
  ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_NE(status.message().find("the host budget is exceeded"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("raise device.host_memory_limit"), std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace sluice::estimate::testing
