// Lion through the trainer on the demo's model (configs/demo_gpt.yaml: a byte-level GPT-2 of 1.3M
// parameters in bf16, here on a synthetic text corpus), its optimizer section swapped for
// DeepSpeed's Lion: the loss falls, with the state on the device and offloaded to host memory at
// stage 2 alike (the same bits: both run the fused CPU Lion kernel over the same elements).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/train/demo_train_util.h"

namespace sluice::train {
namespace {

constexpr int kSteps = 40;

// Lion (a third of AdamW's lr, thrice its decay: the paper's advice) in place of the demo's AdamW.
constexpr char kLionSection[] =
    "optimizer:\n"
    "  type: Lion\n"
    "  params: {lr: 5.0e-4, betas: [0.9, 0.99], weight_decay: 0.3}\n";

test_util::DemoCurve Train(const std::vector<std::string>& more) {
  return test_util::TrainDemo(kLionSection, OptimizerType::kLion, "lion_demo", kSteps, more,
                              /*gather_params=*/true);
}

using test_util::Mean;

TEST(LionTrainTest, DemoModelLossFallsOnTheDeviceAndOffloadedAlike) {
  const test_util::DemoCurve device = Train({"zero_optimization.stage=2"});
  ASSERT_EQ(device.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_NEAR(device.losses.front(), std::log(256.0), 0.3) << "bytes start uniform";
  EXPECT_LT(Mean(device.losses, kSteps - 5, kSteps), Mean(device.losses, 0, 5) - 1.0)
      << "first " << device.losses.front() << " last " << device.losses.back();

  std::printf("Lion on the demo model: loss %.3f -> %.3f (mean of the last 5: %.3f) in %d steps\n",
              device.losses.front(), device.losses.back(), Mean(device.losses, kSteps - 5, kSteps),
              kSteps);

  const test_util::DemoCurve offloaded =
      Train({"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"});
  EXPECT_EQ(std::memcmp(offloaded.losses.data(), device.losses.data(),
                        device.losses.size() * sizeof(double)),
            0)
      << "offloaded Lion left the device's curve";
  EXPECT_EQ(std::memcmp(offloaded.params.data(), device.params.data(),
                        device.params.size() * sizeof(float)),
            0);
}

}  // namespace
}  // namespace sluice::train
