// The step guard's fp16 rounding of device gradients runs as ops on the compute stream: the
// gradients it leaves, the norm and the overflow are those of the host's RoundThrough, bit for
// bit, and a gradient past fp16's range skips the step.
#include "engine/zero/step_guard.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "engine/model/model.h"
#include "engine/zero/partition_copy.h"
#include "engine/zero/shard_grad_norm.h"
#include "engine/zero/shard_layout.h"
#include "tests/common/test_ops.h"
#include "tests/common/test_world.h"
#include "tests/model/model_test_util.h"
#include "tests/zero/zero_test_util.h"

namespace sluice::zero::testing {
namespace {

using model::testing::ToDevice;
using model::testing::ToHost;

struct GuardRig {
  std::unique_ptr<model::Model<float>> model;
  ShardLayout layout;
  std::unique_ptr<Stream> compute;
  std::unique_ptr<CommQueue> queue;
  std::unique_ptr<StepGuard> guard;
};

// One rank's whole shard (stage 0's layout) of a model with a few rounding blocks and a tail,
// fp16, on the test device.
GuardRig MakeRig() {
  GuardRig rig;
  static model::HostAllocator host;
  model::ModelOptions options = TinyGpt();
  options.n_layer = 4;
  options.d_model = 64;
  options.d_ff = 256;
  auto net = model::Model<float>::Create(options, host, sluice::testing::OpsFor<float>(),
                                         model::ModelStorage::kExternal);
  SLUICE_CHECK(net.ok()) << net.status().ToString();
  rig.model = std::move(net).value();
  rig.layout = ShardLayout::Build(rig.model->registry(), 1, 0, /*persistence=*/-1);
  ops::OpsBackend& ops = sluice::testing::OpsFor<float>();
  auto stream = ops.device().CreateStream();
  SLUICE_CHECK(stream.ok()) << stream.status().ToString();
  rig.compute = std::move(stream).value();
  auto comm = TestWorld().Split(TestWorld().rank(), 0);
  SLUICE_CHECK(comm.ok()) << comm.status().ToString();
  auto queue = CommQueue::Create(ops.device(), std::move(comm).value(), /*overlap=*/false);
  SLUICE_CHECK(queue.ok()) << queue.status().ToString();
  rig.queue = std::move(queue).value();
  auto guard =
      StepGuard::Create({.param_dtype = DType::kF16, .num_threads = 1, .sharded = false},
                        rig.layout, /*grads_on_host=*/false, ops, *rig.compute, *rig.queue);
  SLUICE_CHECK(guard.ok()) << guard.status().ToString();
  rig.guard = std::move(guard).value();
  return rig;
}

// Values that fp16 rounds (and flushes below its subnormals), spread over the shard.
std::vector<float> Gradients(int64_t n, float largest) {
  std::vector<float> g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double x = std::sin(0.37 * static_cast<double>(i)) * std::pow(10.0, (i % 9) - 6);
    g[static_cast<size_t>(i)] = static_cast<float>(x * 1.2345);
  }
  g[static_cast<size_t>(n / 2)] = largest;
  return g;
}

TEST(StepGuard, Fp16RoundingOnTheDeviceIsTheHostsBitForBit) {
  GuardRig rig = MakeRig();
  const int64_t n = rig.layout.shard_elements();
  ASSERT_GT(n, 2 * kF16RoundBlock);
  ASSERT_NE(n % kF16RoundBlock, 0) << "no tail block";
  const std::vector<float> values = Gradients(n, 60000.0f);
  DeviceBuffer grads = ToDevice(*rig.compute, values);

  Result<ZeroStepResult> checked =
      rig.guard->Check(grads.data_as<float>(), {.lr = 1e-3, .loss_scale = 1.0, .max_grad_norm = 0});
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_FALSE(checked->overflow);

  std::vector<float> expected = values;
  RoundThrough(expected.data(), n, DType::kF16, 1);
  const std::vector<float> rounded = ToHost(*rig.compute, grads.data_as<float>(), n);
  int64_t changed = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(rounded[static_cast<size_t>(i)]),
              std::bit_cast<uint32_t>(expected[static_cast<size_t>(i)]))
        << "element " << i;
    if (expected[static_cast<size_t>(i)] != values[static_cast<size_t>(i)]) ++changed;
  }
  EXPECT_GT(changed, n / 2) << "fp16 rounding changed too few values to test anything";
  EXPECT_EQ(checked->grad_norm, std::sqrt(LocalSquaredSum(rig.layout, expected.data())));
}

TEST(StepGuard, AGradientPastFp16sRangeSkipsTheStep) {
  GuardRig rig = MakeRig();
  const int64_t n = rig.layout.shard_elements();
  DeviceBuffer grads = ToDevice(*rig.compute, Gradients(n, 70000.0f));
  Result<ZeroStepResult> checked =
      rig.guard->Check(grads.data_as<float>(), {.lr = 1e-3, .loss_scale = 1.0, .max_grad_norm = 0});
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_TRUE(checked->overflow);
  EXPECT_TRUE(checked->local_overflow);
  const std::vector<float> rounded = ToHost(*rig.compute, grads.data_as<float>(), n);
  EXPECT_TRUE(std::isinf(rounded[static_cast<size_t>(n / 2)]));
}

}  // namespace
}  // namespace sluice::zero::testing
