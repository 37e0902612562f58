// The fp32 CPU backend against the fp64 reference backend, activation checkpointing against none
// (bitwise), and bf16 parameter storage against fp32 storage of the same rounded values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ref/half.h"
#include "tests/common/test_ops.h"
#include "tests/model/model_test_util.h"

namespace sluice::model {
namespace {

using testing::Randomize;
using testing::RandomTokens;
using testing::SmallOptions;

constexpr int64_t kPrecisionBatch = 3;
constexpr int64_t kPrecisionSeq = 16;

class BackendTest : public ::testing::TestWithParam<Family> {};

// Declared tolerance: loss within 1e-5 relative; every gradient element within 2e-4 of the
// fp64 value relative to the largest gradient magnitude of its parameter (fp32 rounding
// accumulated through two blocks and the reductions over rows).
TEST_P(BackendTest, Fp32CpuMatchesFp64Reference) {
  const ModelOptions options = SmallOptions(GetParam());
  HostAllocator host;
  auto reference = Model<double>::Create(options, host, sluice::testing::OpsFor<double>());
  auto cpu = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(reference.ok() && cpu.ok());
  (*cpu)->InitializeParameters(7);
  Randomize(**cpu, 60);  // random biases and norm weights too
  const auto& params = (*cpu)->registry().parameters();
  for (int p = 0; p < static_cast<int>(params.size()); ++p) {
    if (params[p].is_alias()) continue;
    for (int64_t e = 0; e < params[p].numel; ++e) {
      (*reference)->SetParameterValue(p, e, (*cpu)->ParameterValue(p, e));
    }
  }
  const std::vector<int32_t> inputs = RandomTokens(kPrecisionBatch * kPrecisionSeq, 50, 61);
  const std::vector<int32_t> targets = RandomTokens(kPrecisionBatch * kPrecisionSeq, 50, 62);
  auto loss64 =
      (*reference)->ForwardBackward(inputs.data(), targets.data(), kPrecisionBatch, kPrecisionSeq);
  auto loss32 =
      (*cpu)->ForwardBackward(inputs.data(), targets.data(), kPrecisionBatch, kPrecisionSeq);
  ASSERT_TRUE(loss64.ok() && loss32.ok());
  EXPECT_NEAR(*loss32, *loss64, 1e-5 * std::abs(*loss64));

  for (const ParameterInfo& info : params) {
    if (info.is_alias()) continue;
    const double* g64 = (*reference)->grads_data() + info.offset;
    const float* g32 = (*cpu)->grads_data() + info.offset;
    double scale = 0.0;
    for (int64_t e = 0; e < info.numel; ++e) scale = std::max(scale, std::abs(g64[e]));
    ASSERT_GT(scale, 0.0) << info.name << " has no gradient";
    double worst = 0.0;
    for (int64_t e = 0; e < info.numel; ++e) {
      worst = std::max(worst, std::abs(static_cast<double>(g32[e]) - g64[e]) / scale);
    }
    EXPECT_LE(worst, 2e-4) << info.name;
  }
}

// Recomputing a block's forward in its backward calls the same ops on the same inputs in the
// same order: the gradients must be bitwise equal, and the activations held at the peak smaller.
TEST_P(BackendTest, CheckpointingGivesBitwiseIdenticalGradients) {
  ModelOptions options = SmallOptions(GetParam());
  options.n_layer = 4;
  ModelOptions checkpointed = options;
  checkpointed.activation_checkpointing = true;
  HostAllocator host;
  auto plain = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  auto ckpt = Model<float>::Create(checkpointed, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(plain.ok() && ckpt.ok());
  (*plain)->InitializeParameters(9);
  (*ckpt)->InitializeParameters(9);
  const std::vector<int32_t> inputs = RandomTokens(kPrecisionBatch * kPrecisionSeq, 50, 63);
  const std::vector<int32_t> targets = RandomTokens(kPrecisionBatch * kPrecisionSeq, 50, 64);
  for (int step = 0; step < 2; ++step) {  // the second call accumulates onto the first
    auto a =
        (*plain)->ForwardBackward(inputs.data(), targets.data(), kPrecisionBatch, kPrecisionSeq);
    auto b =
        (*ckpt)->ForwardBackward(inputs.data(), targets.data(), kPrecisionBatch, kPrecisionSeq);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b);
  }
  const size_t bytes = static_cast<size_t>((*plain)->ParameterCount()) * sizeof(float);
  EXPECT_EQ(std::memcmp((*plain)->grads_data(), (*ckpt)->grads_data(), bytes), 0);
  EXPECT_LT((*ckpt)->last_peak_activation_bytes(), (*plain)->last_peak_activation_bytes());
}

// bf16 storage: the model computes with the widened bf16 values, so it must match, bit for bit,
// an fp32-storage model holding the same rounded values.
TEST_P(BackendTest, Bf16StorageComputesWithTheRoundedValues) {
  ModelOptions options = SmallOptions(GetParam());
  ModelOptions bf16_options = options;
  bf16_options.param_dtype = DType::kBF16;
  HostAllocator host;
  auto fp32 = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  auto bf16 = Model<float>::Create(bf16_options, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(fp32.ok() && bf16.ok());
  EXPECT_EQ((*bf16)->params().dtype(), DType::kBF16);
  EXPECT_EQ((*bf16)->params().nbytes(), static_cast<size_t>((*fp32)->ParameterCount()) * 2);
  (*fp32)->InitializeParameters(11);
  (*bf16)->InitializeParameters(11);
  // Same counter-based init, rounded: the bf16 model holds the fp32 model's values rounded.
  const float* p32 = (*fp32)->params().data<float>();
  const uint16_t* p16 = (*bf16)->params().data<uint16_t>();
  for (int64_t i = 0; i < (*fp32)->ParameterCount(); ++i) {
    ASSERT_EQ(p16[i], kernels::F32ToBf16(p32[i])) << "element " << i;
  }
  float* writable = (*fp32)->params().data<float>();
  for (int64_t i = 0; i < (*fp32)->ParameterCount(); ++i) writable[i] = kernels::Bf16ToF32(p16[i]);

  const std::vector<int32_t> inputs = RandomTokens(kPrecisionBatch * kPrecisionSeq, 50, 65);
  const std::vector<int32_t> targets = RandomTokens(kPrecisionBatch * kPrecisionSeq, 50, 66);
  auto a = (*fp32)->ForwardBackward(inputs.data(), targets.data(), kPrecisionBatch, kPrecisionSeq);
  auto b = (*bf16)->ForwardBackward(inputs.data(), targets.data(), kPrecisionBatch, kPrecisionSeq);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ((*bf16)->grads().dtype(), DType::kF32);
  const size_t bytes = static_cast<size_t>((*fp32)->ParameterCount()) * sizeof(float);
  EXPECT_EQ(std::memcmp((*fp32)->grads_data(), (*bf16)->grads_data(), bytes), 0);
}

INSTANTIATE_TEST_SUITE_P(Families, BackendTest, ::testing::Values(Family::kGpt2, Family::kLlama),
                         [](const ::testing::TestParamInfo<Family>& info) {
                           return std::string(FamilyName(info.param));
                         });

}  // namespace
}  // namespace sluice::model
