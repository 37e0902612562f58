// The model as the engine drives it: deterministic initialization, unit hooks in trace order,
// memory from a capped device arena, input validation and the evaluation paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/model/init.h"
#include "kernels/ref/ops_loss.h"
#include "runtime/device/device_factory.h"
#include "tests/common/test_ops.h"
#include "tests/model/model_test_util.h"

namespace sluice::model {
namespace {

using testing::RandomTokens;
using testing::TinyOptions;

ModelOptions InitOptions() {
  ModelOptions o = TinyOptions(Family::kGpt2);
  o.n_layer = 4;
  o.d_model = 64;
  o.d_ff = 256;
  o.n_head = 4;
  o.n_kv_head = 4;
  o.vocab_size = 300;
  o.seq_len = 32;
  o.init_std = 0.02;
  o.num_threads = 0;
  return o;
}

TEST(ModelInitTest, DeterministicGpt2StyleInit) {
  const ModelOptions options = InitOptions();
  HostAllocator host;
  auto a = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  auto b = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(a.ok() && b.ok());
  (*a)->InitializeParameters(1234);
  (*b)->InitializeParameters(1234);
  const size_t bytes = (*a)->params().nbytes();
  EXPECT_EQ(std::memcmp((*a)->params_data(), (*b)->params_data(), bytes), 0);
  (*b)->InitializeParameters(1235);
  EXPECT_NE(std::memcmp((*a)->params_data(), (*b)->params_data(), bytes), 0);

  const ParameterRegistry& registry = (*a)->registry();
  const auto stddev = [&](const char* name) {
    const ParameterInfo& info = registry.parameter(*registry.Find(name));
    double sum = 0.0, squares = 0.0;
    for (int64_t e = 0; e < info.numel; ++e) {
      const double v = (*a)->ParameterValue(*registry.Find(name), e);
      sum += v;
      squares += v * v;
    }
    const double mean = sum / info.numel;
    EXPECT_NEAR(mean, 0.0, 5.0 * 0.02 / std::sqrt(info.numel)) << name;
    return std::sqrt(squares / info.numel - mean * mean);
  };
  EXPECT_NEAR(stddev("transformer.wte.weight"), 0.02, 0.0005);
  EXPECT_NEAR(stddev("transformer.h.0.mlp.c_fc.weight"), 0.02, 0.0005);
  const double residual = 0.02 / std::sqrt(2.0 * 4);
  EXPECT_NEAR(stddev("transformer.h.1.attn.c_proj.weight"), residual, residual * 0.05);
  EXPECT_NEAR(stddev("transformer.h.3.mlp.c_proj.weight"), residual, residual * 0.05);
  for (int64_t e = 0; e < 64; ++e) {
    EXPECT_EQ((*a)->ParameterValue(*registry.Find("transformer.h.0.ln_1.weight"), e), 1.0f);
    EXPECT_EQ((*a)->ParameterValue(*registry.Find("transformer.h.0.attn.c_attn.bias"), e), 0.0f);
    EXPECT_EQ((*a)->ParameterValue(*registry.Find("transformer.ln_f.bias"), e), 0.0f);
  }
}

// Any slice of a parameter can be initialized on its own (a ZeRO rank's shard) and matches.
TEST(ModelInitTest, ShardInitMatchesWholeInit) {
  const ModelOptions options = InitOptions();
  HostAllocator host;
  auto model = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(model.ok());
  (*model)->InitializeParameters(99);
  const ParameterRegistry& registry = (*model)->registry();
  const int p = *registry.Find("transformer.h.2.mlp.c_fc.weight");
  const ParameterInfo& info = registry.parameter(p);
  std::vector<float> shard(1000);
  InitializeRange<float>(info, 99, options.init_std, options.n_layer, 5000, 6000, shard.data());
  for (int64_t e = 0; e < 1000; ++e) {
    ASSERT_EQ(shard[e], (*model)->ParameterValue(p, 5000 + e)) << e;
  }
}

class RecordingHooks final : public UnitHooks {
 public:
  Status BeforeForward(int unit) override { return Log("F+", unit); }
  Status AfterForward(int unit) override { return Log("F-", unit); }
  Status BeforeBackward(int unit) override { return Log("B+", unit); }
  Status AfterBackward(int unit) override { return Log("B-", unit); }

  std::vector<std::string> events;
  int fail_at = -1;

 private:
  Status Log(const char* what, int unit) {
    events.push_back(std::string(what) + std::to_string(unit));
    if (static_cast<int>(events.size()) == fail_at) return UnavailableError("fetch failed");
    return OkStatus();
  }
};

TEST(ModelHooksTest, UnitsRunInTraceOrderThenReverse) {
  HostAllocator host;
  auto model =
      Model<float>::Create(TinyOptions(Family::kLlama), host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(model.ok());
  (*model)->InitializeParameters(1);
  RecordingHooks hooks;
  (*model)->SetHooks(&hooks);
  const std::vector<int32_t> tokens = RandomTokens(10, 11, 3);
  ASSERT_TRUE((*model)->ForwardBackward(tokens.data(), tokens.data(), 2, 5).ok());
  const std::vector<std::string> expected = {"F+0", "F-0", "F+1", "F-1", "F+2", "F-2", "F+3",
                                             "F-3", "F+4", "F-4", "B+4", "B-4", "B+3", "B-3",
                                             "B+2", "B-2", "B+1", "B-1", "B+0", "B-0"};
  EXPECT_EQ(hooks.events, expected);

  hooks.events.clear();
  hooks.fail_at = 13;  // B+3
  const auto failed = (*model)->ForwardBackward(tokens.data(), tokens.data(), 2, 5);
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(hooks.events.size(), 13u);
  (*model)->SetHooks(nullptr);
}

TEST(ModelDeviceTest, LivesInTheDeviceArenaAndReportsExhaustion) {
  DeviceOptions device_options;
  device_options.memory_limit_bytes = 4 << 20;
  auto device = CreateDevice(device_options);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  DeviceAllocator allocator(**device);
  const std::unique_ptr<ops::OpsBackend> ops = sluice::testing::CpuOpsOn(**device);
  ModelOptions options = InitOptions();  // ~0.24M parameters: ~1.9 MiB of params and grads
  auto model = Model<float>::Create(options, allocator, *ops);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->params().tier(), MemoryTier::kDevice);
  (*model)->InitializeParameters(5);
  const std::vector<int32_t> small = RandomTokens(2 * 8, 300, 6);
  const std::vector<int32_t> small_targets = RandomTokens(2 * 8, 300, 16);
  auto loss = (*model)->ForwardBackward(small.data(), small_targets.data(), 2, 8);
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  EXPECT_NEAR(*loss, std::log(300.0), 0.1);  // a fresh model predicts about uniformly

  const std::vector<int32_t> large = RandomTokens(64 * 32, 300, 7);
  auto too_big = (*model)->ForwardBackward(large.data(), large.data(), 64, 32);
  ASSERT_EQ(too_big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("activations"), std::string::npos)
      << too_big.status().ToString();
  // Everything the failed pass allocated was given back: the small batch still fits.
  EXPECT_TRUE((*model)->ForwardBackward(small.data(), small.data(), 2, 8).ok());
}

TEST(ModelInputTest, RejectsBadTokensAndLengths) {
  HostAllocator host;
  auto model =
      Model<float>::Create(TinyOptions(Family::kGpt2), host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> inputs = RandomTokens(10, 11, 8);
  std::vector<int32_t> targets = RandomTokens(10, 11, 9);
  inputs[6] = 11;
  auto bad_input = (*model)->ForwardBackward(inputs.data(), targets.data(), 2, 5);
  EXPECT_EQ(bad_input.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_input.status().message().find("input token 11 at row 1, position 1"),
            std::string::npos)
      << bad_input.status().ToString();
  inputs[6] = 3;
  targets[2] = -5;
  auto bad_target = (*model)->ForwardLoss(inputs.data(), targets.data(), 2, 5);
  EXPECT_NE(bad_target.status().message().find("target -5 at row 0, position 2"), std::string::npos)
      << bad_target.status().ToString();
  targets[2] = kernels::kIgnoreIndex;
  EXPECT_TRUE((*model)->ForwardLoss(inputs.data(), targets.data(), 2, 5).ok());
  std::vector<int32_t> long_inputs = RandomTokens(8, 11, 10);
  auto too_long = (*model)->ForwardLoss(long_inputs.data(), long_inputs.data(), 1, 8);
  EXPECT_NE(too_long.status().message().find("model.seq_len = 7"), std::string::npos)
      << too_long.status().ToString();
}

// The logits of ForwardLogits give, through the reference cross-entropy, the loss ForwardLoss
// reports; evaluation leaves the gradients alone.
TEST(ModelEvalTest, LogitsAndLossAgreeAndGradientsStayUntouched) {
  HostAllocator host;
  auto model =
      Model<double>::Create(TinyOptions(Family::kLlama), host, sluice::testing::OpsFor<double>());
  ASSERT_TRUE(model.ok());
  (*model)->InitializeParameters(21);
  const std::vector<int32_t> inputs = RandomTokens(10, 11, 22);
  const std::vector<int32_t> targets = RandomTokens(10, 11, 23);
  std::vector<double> logits(10 * 11);
  ASSERT_TRUE((*model)->ForwardLogits(inputs.data(), 2, 5, logits.data()).ok());
  std::vector<double> lse(10);
  const double expected =
      kernels::ref::CrossEntropyForward(logits.data(), targets.data(), lse.data(), 10, 11);
  auto loss = (*model)->ForwardLoss(inputs.data(), targets.data(), 2, 5);
  ASSERT_TRUE(loss.ok());
  EXPECT_DOUBLE_EQ(*loss, expected);
  for (int64_t i = 0; i < (*model)->ParameterCount(); ++i) {
    ASSERT_EQ((*model)->grads_data()[i], 0.0);
  }
}

}  // namespace
}  // namespace sluice::model
